#!/usr/bin/env python3
"""How alike do two words begin? Mean log-mel spectra of the first 120 ms of speech.

For each engine, averages over up to 60 clips of `left` and of `yes` (corpus in Speech
Commands layout with speakers.tsv) the 20-bin log-mel spectrum (40 ms Hann frames every
20 ms, as the keyword spotters see it) over the first 120 ms after the speech begins (the
first 10 ms window within 20 dB of the loudest), removes each spectrum's mean (the models
normalise level away), and prints RMS distances in log units between them.

    python3 docs/results/kws-quality/onset_spectra.py /work/kws-runs/corpus12p
"""

import csv
import glob
import os
import sys
import wave

import numpy as np

SR, N_FFT, BINS = 16_000, 1024, 20


def mel_filterbank():
    mel = lambda f: 1127 * np.log(1 + f / 700)  # noqa: E731
    hz = lambda m: 700 * (np.exp(m / 1127) - 1)  # noqa: E731
    edges = hz(np.linspace(mel(20), mel(SR / 2), BINS + 2))
    freqs = np.fft.rfftfreq(N_FFT, 1 / SR)
    fb = np.zeros((BINS, len(freqs)))
    for i in range(BINS):
        lo, c, hi = edges[i:i + 3]
        fb[i] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
    return fb


FB = mel_filterbank()


def read(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16) / 32768.0


def onset_spectrum(x):
    win = SR // 100
    power = np.array([np.mean(x[i:i + win] ** 2) for i in range(0, len(x), win)])
    onset = np.nonzero(power >= power.max() * 0.01)[0][0] * win
    seg = x[onset:onset + 120 * SR // 1000]
    frame, hop = 40 * SR // 1000, 20 * SR // 1000
    frames = [seg[i:i + frame] * np.hanning(frame) for i in range(0, len(seg) - frame + 1, hop)]
    power = np.array([np.abs(np.fft.rfft(f, N_FFT)) ** 2 for f in frames])
    logmel = np.log(power @ FB.T + 1e-10).mean(0)
    return logmel - logmel.mean()


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "speakers.tsv")) as f:
        engine_of = {r["speaker"]: r["engine"] for r in csv.DictReader(f, delimiter="\t")}
    engines = sorted(set(engine_of.values()))
    mean = {}
    for e in engines:
        for word in ["left", "yes"]:
            clips = [p for p in sorted(glob.glob(os.path.join(root, word, "*.wav")))
                     if engine_of.get(os.path.basename(p).split("_")[0]) == e][:60]
            mean[e, word] = np.mean([onset_spectrum(read(p)) for p in clips], axis=0)
    dist = lambda a, b: float(np.sqrt(np.mean((mean[a] - mean[b]) ** 2)))  # noqa: E731
    for e in engines:
        print(f"{e}: its left vs its yes {dist((e, 'left'), (e, 'yes')):.2f}")
    for a in engines:
        for b in engines:
            if a != b:
                print(f"{a} left vs {b} left {dist((a, 'left'), (b, 'left')):.2f}, "
                      f"vs {b} yes {dist((a, 'left'), (b, 'yes')):.2f}")


if __name__ == "__main__":
    main()
