#!/usr/bin/env python3
"""Which of a held-out engine's voices does a keyword spotter miss, and how?

Classifies every clip of one engine's speakers in a corpus (Speech Commands layout with
speakers.tsv) with `hush-device classify`, groups them by the speakers' base voice (for
espeak-ng by accent: `en-gb+f3` counts as `en-gb`), and prints per group the balanced
keyword accuracy (mean recall over the ten commands), each command's hits, and the most
frequent confusions. A held-out engine's number is an average over its voices; this says
which voices make it. Given `--model` more than once, it scores the models' ensemble:
each clip's label is the class of the highest mean probability over the models.

    python3 docs/results/kws-quality/per_voice.py --hush-device target/debug/hush-device \
        --corpus /work/kws-runs/corpus12pkeo --engine festival \
        --model /work/kws-runs/x18-pkeo-fest/runs/without-festival
"""

import argparse
import collections
import json
import os
import subprocess

COMMANDS = "yes no up down left right on off stop go".split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hush-device", required=True, help="the hush-device binary")
    ap.add_argument("--corpus", required=True, help="corpus directory with speakers.tsv")
    ap.add_argument("--engine", required=True, help="engine whose speakers to classify")
    ap.add_argument("--model", required=True, action="append",
                    help="model directory (model.json, model.onnx); repeat for an ensemble")
    a = ap.parse_args()

    voice_of = {}
    with open(os.path.join(a.corpus, "speakers.tsv"), encoding="utf-8") as f:
        for line in f.read().splitlines()[1:]:
            speaker, engine, voice = line.split("\t")[:3]
            if engine == a.engine:
                voice_of[speaker] = voice.split("+")[0]
    if not voice_of:
        raise SystemExit(f"{a.corpus}/speakers.tsv has no speaker of engine {a.engine}")
    files = []
    for word in sorted(os.listdir(a.corpus)):
        d = os.path.join(a.corpus, word)
        if word in COMMANDS or word in ("_unknown_", "_silence_"):
            files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                      if f.split("_")[0] in voice_of]
    scores = collections.defaultdict(collections.Counter)
    for model in a.model:
        out = subprocess.run([a.hush_device, "classify", "--model", model] + files,
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            scores[r["file"]].update(r["scores"])
    results = [{"file": f, "label": max(s, key=s.get)} for f, s in scores.items()]

    hits = collections.defaultdict(collections.Counter)
    totals = collections.defaultdict(collections.Counter)
    errors = collections.defaultdict(collections.Counter)
    for r in results:
        truth = os.path.basename(os.path.dirname(r["file"]))
        voice = voice_of[os.path.basename(r["file"]).split("_")[0]]
        totals[voice][truth] += 1
        hits[voice][truth] += r["label"] == truth
        if truth in COMMANDS and r["label"] != truth:
            errors[voice][f"{truth}->{r['label']}"] += 1
    for table in (hits, totals, errors):
        table["(all voices)"] = sum(table.values(), collections.Counter())
    for voice in sorted(totals):
        recalls = [hits[voice][w] / totals[voice][w] for w in COMMANDS if totals[voice][w]]
        print(f"{voice}: balanced keyword accuracy {sum(recalls) / len(recalls):.3f}; "
              + " ".join(f"{w} {hits[voice][w]}/{totals[voice][w]}" for w in COMMANDS))
        print("   most frequent errors:",
              ", ".join(f"{e} {n}" for e, n in errors[voice].most_common(6)))


if __name__ == "__main__":
    main()
