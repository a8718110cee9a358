#!/usr/bin/env python3
"""Speaker-disjoint test accuracy of keyword spotters on a synthetic corpus's test speakers.

Classifies every clip of the corpus's test speakers (Speech Commands' hash rule, as
`hush_device::dataset::split_of_speaker`: 10 % validation, 10 % test) in the class folders
the model knows, with `hush-device classify`, and prints the accuracy and the balanced
keyword accuracy (mean recall over the keywords, `_unknown_` and `_silence_` left out).
This is how the bundled models' test accuracy is quoted (corpus12's 810 clips, corpus22's
891; the model cards' own test split also holds sentence crops).

    python3 docs/results/kws-quality/test_accuracy.py --hush-device target/debug/hush-device \
        --corpus /work/kws-runs/corpus12 --model models/kws-12
"""

import argparse
import collections
import hashlib
import json
import os
import subprocess


def split_of_speaker(speaker):
    value = int(hashlib.sha1(speaker.encode()).hexdigest(), 16) % 2**27
    percent = value * (100.0 / (2**27 - 1))
    return "validation" if percent < 10 else "test" if percent < 20 else "train"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hush-device", required=True, help="the hush-device binary")
    ap.add_argument("--corpus", required=True, help="corpus directory (one folder per class)")
    ap.add_argument("--model", required=True, action="append", help="model directory; repeatable")
    a = ap.parse_args()
    for model in a.model:
        with open(os.path.join(model, "model.json"), encoding="utf-8") as f:
            labels = json.load(f)["labels"]
        files = []
        for label in labels:
            d = os.path.join(a.corpus, label)
            files += [(os.path.join(d, n), label) for n in sorted(os.listdir(d))
                      if split_of_speaker(n.split("_nohash_")[0]) == "test"]
        out = subprocess.run([a.hush_device, "classify", "--model", model]
                             + [f for f, _ in files],
                             capture_output=True, text=True, check=True).stdout
        predicted = {}
        for line in out.splitlines():
            r = json.loads(line)
            predicted[r["file"]] = r["label"]
        hits, totals = collections.Counter(), collections.Counter()
        for f, label in files:
            totals[label] += 1
            hits[label] += predicted[f] == label
        keywords = [l for l in labels if not l.startswith("_")]
        accuracy = sum(hits.values()) / len(files)
        balanced = sum(hits[k] / totals[k] for k in keywords) / len(keywords)
        print(json.dumps({"model": model, "clips": len(files), "right": sum(hits.values()),
                          "accuracy": round(accuracy, 4),
                          "balanced_keyword_accuracy": round(balanced, 4)}))


if __name__ == "__main__":
    main()
