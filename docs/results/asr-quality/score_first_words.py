#!/usr/bin/env python3
"""Greedy (or --lexicon) WER and CER of an ASR package on the bundled corpus, and the WER
without each utterance's first word (reference and hypothesis both lose their first word),
which shows how much of the error is utterance-initial.

Usage (from the repository root, after `cargo build -p hush-device`):
    python3 docs/results/asr-quality/score_first_words.py models/asr [--lexicon models/asr/lexicon.txt]
Only the standard library; it runs `target/debug/hush-device transcribe`.
"""
import glob
import json
import subprocess
import sys


def edits(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[:], i
        for j in range(1, len(b) + 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(b)]


def main():
    model, extra = sys.argv[1], sys.argv[2:]
    refs = {}
    for t in glob.glob("data/corpus/asr/*/*/*.trans.txt"):
        for line in open(t):
            utt, words = line.strip().split(" ", 1)
            refs[utt] = (t.rsplit("/", 1)[0], words.lower())
    files = [f"{d}/{u}.flac" for u, (d, _) in sorted(refs.items())]
    out = subprocess.run(
        ["target/debug/hush-device", "transcribe", "--model", model, *extra, *files],
        capture_output=True, text=True, check=True,
    ).stdout
    e = n = e1 = n1 = c = nc = 0
    for line in out.splitlines():
        j = json.loads(line)
        ref = refs[j["file"].rsplit("/", 1)[1].rsplit(".", 1)[0]][1]
        r, h = ref.split(), j["text"].split()
        e, n = e + edits(r, h), n + len(r)
        e1, n1 = e1 + edits(r[1:], h[1:]), n1 + len(r) - 1
        c, nc = c + edits(list(ref), list(j["text"])), nc + len(ref)
    print(f"{model} {' '.join(extra)}: WER {e / n:.3f}, CER {c / nc:.3f}, "
          f"WER without first words {e1 / n1:.3f} ({len(out.splitlines())} utterances)")


if __name__ == "__main__":
    main()
