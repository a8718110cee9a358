#!/usr/bin/env python3
"""Which part of a word does a keyword spotter decide on? Cut the end off and ask again.

For each engine and word, takes up to --clips clips of that engine's speakers from a
corpus (Speech Commands layout with speakers.tsv), silences everything from N ms before the
end of the speech on (the end: the last 10 ms window within 20 dB of the loudest, as in
trainer-host/train/src/speech_bounds.rs), and classifies the originals and each cut with
`hush-device classify`. Prints, per model, engine, word and cut, how many clips got each
label, and writes the same as JSON.

If a model's error on a word stays when the word's last consonants are gone, the error
is not in those consonants.

    python3 docs/results/kws-quality/tail_cut.py --hush-device target/debug/hush-device \
        --corpus /work/kws-runs/corpus12p --models /work/kws-runs/x13-pico/runs/without-espeak-ng \
        --engines espeak-ng,flite --words left,up --cuts 0,40,80,120,160 --out /tmp/tail-cut.json
"""

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np


def read_wav(path):
    with wave.open(path) as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            sys.exit(f"{path}: expected 16-bit mono WAV")
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16), w.getframerate()


def write_wav(path, samples, rate):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype(np.int16).tobytes())


def speech_end(x, rate):
    """One past the last sample of the last 10 ms window within 20 dB of the loudest."""
    win = rate // 100
    power = np.array([np.mean(x[i:i + win].astype(np.float64) ** 2) for i in range(0, len(x), win)])
    if power.max() <= 0:
        return None
    loud = np.nonzero(power >= power.max() * 0.01)[0]
    return min(len(x), (loud[-1] + 1) * win)


def labels(hush_device, model, folder):
    out = subprocess.run([hush_device, "classify", "--model", model, folder],
                         check=True, capture_output=True, text=True).stdout
    return collections.Counter(json.loads(line)["label"] for line in out.splitlines() if line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hush-device", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--models", required=True, help="comma-separated model folders")
    ap.add_argument("--engines", required=True)
    ap.add_argument("--words", required=True)
    ap.add_argument("--cuts", default="0,40,80,120,160", help="ms before the speech's end")
    ap.add_argument("--clips", type=int, default=120)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    with open(os.path.join(a.corpus, "speakers.tsv")) as f:
        engine_of = {r["speaker"]: r["engine"] for r in csv.DictReader(f, delimiter="\t")}
    cuts = [int(c) for c in a.cuts.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in a.engines.split(","):
            for word in a.words.split(","):
                folder = os.path.join(a.corpus, word)
                clips = [f for f in sorted(os.listdir(folder))
                         if f.endswith(".wav") and engine_of.get(f.split("_")[0]) == engine]
                clips = clips[:a.clips]
                if not clips:
                    sys.exit(f"{folder}: no clips of engine {engine}")
                for cut in cuts:
                    d = os.path.join(tmp, f"{engine}-{word}-{cut}")
                    os.makedirs(d)
                    for name in clips:
                        x, rate = read_wav(os.path.join(folder, name))
                        y = x.copy()
                        end = speech_end(x, rate)
                        if cut and end is not None:
                            y[max(0, end - cut * rate // 1000):] = 0
                        write_wav(os.path.join(d, name), y, rate)
                    for model in a.models.split(","):
                        got = labels(a.hush_device, model, d)
                        results.append({"model": model, "engine": engine, "word": word,
                                        "cut_ms": cut, "clips": len(clips), "labels": dict(got)})
                        top = ", ".join(f"{k} {v}" for k, v in got.most_common(4))
                        name = "/".join(model.rstrip("/").split("/")[-3:])
                        print(f"{name}\t{engine}\t{word}\tcut {cut} ms\t{top}")
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
