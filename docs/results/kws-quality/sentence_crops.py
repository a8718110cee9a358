#!/usr/bin/env python3
"""A KWS corpus with one-second crops of running speech as extra `_unknown_` clips.

A keyword spotter trained on isolated words has never heard a second cut out of a
sentence, and in a stream it raises most of its false alarms there (README.md,
"Streaming"). This writes a copy of a Speech Commands corpus (`--kws`, hard links) with
a `_sentence_/` word folder of crops: from every utterance of a LibriSpeech-layout corpus
(`--asr`) whose transcript holds none of the keywords, `--per-utterance` random
one-second windows (seeded), each named `<speaker>_nohash_<utt>-<k>.wav` after the
utterance's speaker, so the crops fall into the train/validation/test split of their
speaker like any clip. Every word folder that is not a keyword trains `_unknown_`.
`--exclude-texts` names a LibriSpeech-layout corpus whose transcripts are skipped (the
bundled `data/corpus/asr`, which streaming_eval.py speaks: the evaluation then hears
only sentences the model never heard a crop of).

    python3 docs/results/kws-quality/sentence_crops.py --kws /work/kws-runs/corpus12 \\
        --asr /work/asr-runs/synth120 --exclude-texts data/corpus/asr --per-utterance 2 \
        --out /work/kws-runs/corpus12s
"""

import argparse
import os
import random
import re
import subprocess
import wave

import numpy as np

RATE = 16_000
KEYWORDS = "yes no up down left right on off stop go".split()


def read(path):
    """A sound file as 16-bit samples at 16 kHz mono (decoded by sox)."""
    raw = subprocess.run(
        ["sox", path, "-t", "raw", "-e", "signed", "-b", "16", "-c", "1", "-r", str(RATE), "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype="<i2")


def transcripts(corpus):
    """Every (utterance id, lower-case transcript, directory) of a LibriSpeech-layout corpus."""
    for root, _, files in sorted(os.walk(corpus)):
        for t in sorted(f for f in files if f.endswith(".trans.txt")):
            for line in open(os.path.join(root, t)):
                utt, text = line.strip().split(" ", 1)
                yield utt, text.lower(), root


def link_tree(src, dst):
    for root, _, files in os.walk(src):
        out = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(out, exist_ok=True)
        for f in files:
            target = os.path.join(out, f)
            if not os.path.exists(target):
                os.link(os.path.join(root, f), target)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kws", required=True, help="Speech Commands corpus to copy")
    ap.add_argument("--asr", required=True, help="LibriSpeech-layout corpus to crop")
    ap.add_argument("--per-utterance", type=int, default=2)
    ap.add_argument("--keywords", default=",".join(KEYWORDS))
    ap.add_argument("--exclude-texts", help="corpus whose transcripts are not cropped")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    keywords = a.keywords.split(",")
    link_tree(a.kws, a.out)
    crops_dir = os.path.join(a.out, "_sentence_")
    os.makedirs(crops_dir, exist_ok=True)
    excluded = {text for _, text, _ in transcripts(a.exclude_texts)} if a.exclude_texts else set()
    written = skipped = 0
    for utt, text, root in transcripts(a.asr):
        if text in excluded or any(re.search(rf"\b{k}\b", text) for k in keywords):
            skipped += 1
            continue
        audio = None
        for ext in (".flac", ".wav"):
            p = os.path.join(root, utt + ext)
            if os.path.exists(p):
                audio = read(p)
        if audio is None or len(audio) <= RATE:
            skipped += 1
            continue
        speaker = utt.split("-")[0]
        for k in range(a.per_utterance):
            at = rng.randrange(len(audio) - RATE)
            with wave.open(os.path.join(crops_dir, f"{speaker}_nohash_{utt}-{k}.wav"), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(RATE)
                w.writeframes(audio[at:at + RATE].tobytes())
            written += 1
    print(f"{written} crops in {crops_dir}; {skipped} utterances skipped (excluded, a keyword, or under 1 s)")


if __name__ == "__main__":
    main()
