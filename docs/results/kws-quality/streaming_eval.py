#!/usr/bin/env python3
"""Streaming keyword spotting on a long recording: hits, misses and false alarms per hour.

Builds one long 16 kHz recording from the bundled corpus (every keyword clip and every
`_unknown_` clip of data/corpus/kws, and every spoken command of data/corpus/asr, in a
seeded random order, 0.3-1.5 s apart, over background noise from the corpus's
_background_noise_ at a random level per stretch), runs `hush-device listen` on it with
each model and threshold, and scores every detection against what was said where:

- a keyword clip is hit when a detection of its word ends within [start + 0.1 s, end + 1 s]
  of it (the first one; a second is a false alarm), and missed otherwise;
- a detection of a word that a spoken command contains, within the command's span, is
  a keyword said in a sentence: counted apart, neither hit nor false alarm;
- every other detection is a false alarm, counted by what it falls near: a sentence, a
  keyword clip (a wrong word), an `_unknown_` clip, or only noise.

False alarms per hour are over the whole recording's duration. Needs numpy and sox.

    python3 docs/results/kws-quality/streaming_eval.py --hush-device target/debug/hush-device \
        --models models/kws-12,/work/kws-runs/kws12-cmvn-only --out /tmp/stream-eval

With `--vad MODEL.onnx` every setting runs twice, without and with `listen --vad`, and
each run's CPU time (user + system, of the listen process) is recorded, as are the
keywords the gate lost (hit without it, missed with it). `--gap` spaces the clips further
and `--max-seconds` stops placing them, for a recording that is mostly silence:

    python3 docs/results/kws-quality/streaming_eval.py --models models/kws-12 --thresholds 0.8 \
        --gap 5,25 --max-seconds 600 --vad models/vad/silero_vad_16k_sequence.onnx --out /tmp/vad-eval
"""

import argparse
import json
import os
import random
import re
import resource
import subprocess
import wave

import numpy as np

RATE = 16_000
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
KEYWORDS = "yes no up down left right on off stop go".split()


def read(path):
    """A sound file as float32 in [-1, 1] at 16 kHz mono (decoded by sox)."""
    raw = subprocess.run(
        ["sox", path, "-t", "raw", "-e", "signed", "-b", "16", "-c", "1", "-r", str(RATE), "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


def events(corpus_kws, corpus_asr):
    """Every clip to place: (kind, word or transcript, path)."""
    out = []
    for word in KEYWORDS + ["_unknown_"]:
        d = os.path.join(corpus_kws, word)
        for f in sorted(os.listdir(d)):
            if f.endswith(".flac"):
                out.append(("keyword" if word in KEYWORDS else "unknown", word, os.path.join(d, f)))
    for root, _, files in sorted(os.walk(corpus_asr)):
        for t in sorted(f for f in files if f.endswith(".trans.txt")):
            for line in open(os.path.join(root, t)):
                utt, text = line.strip().split(" ", 1)
                out.append(("sentence", text.lower(), os.path.join(root, utt + ".flac")))
    return out


def build(corpus_kws, corpus_asr, seed, path, gaps=(0.3, 1.5), max_seconds=None):
    rng = random.Random(seed)
    todo = events(corpus_kws, corpus_asr)
    rng.shuffle(todo)
    noise_dir = os.path.join(corpus_kws, "_background_noise_")
    noises = [read(os.path.join(noise_dir, f)) for f in sorted(os.listdir(noise_dir)) if f.endswith(".flac")]
    pieces, placed, at = [], [], 0
    for kind, what, clip in todo:
        if max_seconds is not None and at >= max_seconds * RATE:
            break
        gap = np.zeros(int(rng.uniform(*gaps) * RATE), dtype=np.float32)
        at += len(gap)
        audio = read(clip)
        placed.append({"kind": kind, "what": what, "start_s": at / RATE,
                       "end_s": (at + len(audio)) / RATE, "file": os.path.relpath(clip, REPO)})
        pieces += [gap, audio]
        at += len(audio)
    pieces.append(np.zeros(RATE, dtype=np.float32))
    x = np.concatenate(pieces)
    # Background: 10 s stretches of one noise at a level 20-45 dB below full scale.
    for s in range(0, len(x), 10 * RATE):
        n = noises[rng.randrange(len(noises))]
        off = rng.randrange(max(1, len(n) - 10 * RATE))
        seg = n[off:off + 10 * RATE][: len(x) - s]
        rms = float(np.sqrt(np.mean(seg ** 2))) or 1.0
        x[s:s + len(seg)] += seg / rms * 10 ** (-rng.uniform(20, 45) / 20)
    x = np.clip(x, -1, 1)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return placed, len(x) / RATE


def score(placed, detections, hours):
    kw = [e for e in placed if e["kind"] == "keyword"]
    kw_index = {i: k for k, i in enumerate(i for i, e in enumerate(placed) if e["kind"] == "keyword")}
    hit = set()
    false_alarms, in_sentence = [], 0
    by_context = {"sentence": 0, "keyword": 0, "unknown": 0, "noise": 0}
    for d in detections:
        t, label = d["time_s"], d["label"]
        near = [i for i, e in enumerate(placed) if e["start_s"] + 0.1 <= t <= e["end_s"] + 1.0]
        match = [i for i in near if placed[i]["kind"] == "keyword" and placed[i]["what"] == label
                 and i not in hit]
        if match:
            hit.add(match[0])
            continue
        if any(placed[i]["kind"] == "sentence" and re.search(rf"\b{label}\b", placed[i]["what"])
               for i in near):
            in_sentence += 1
            continue
        kinds = {placed[i]["kind"] for i in near}
        context = next((k for k in ("sentence", "keyword", "unknown") if k in kinds), "noise")
        by_context[context] += 1
        false_alarms.append({**d, "near": [placed[i]["what"] for i in near]})
    return {
        "keywords": len(kw),
        "hits": len(hit),
        "hit_clips": sorted(kw_index[i] for i in hit),
        "recall": len(hit) / len(kw),
        "false_alarms": len(false_alarms),
        "false_alarms_per_hour": len(false_alarms) / hours,
        "false_alarms_by_context": by_context,
        "keyword_in_a_sentence": in_sentence,
        "false_alarm_examples": false_alarms[:20],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hush-device", default=os.path.join(REPO, "target/debug/hush-device"))
    ap.add_argument("--models", required=True, help="model package directories, comma-separated")
    ap.add_argument("--thresholds", default="0.6,0.8,0.9")
    ap.add_argument("--smooth-ms", default="500", help="posterior smoothing spans, comma-separated")
    ap.add_argument("--out", required=True)
    ap.add_argument("--hop-ms", help="listen's --hop-ms (default: listen's own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gap", default="0.3,1.5", help="silence between clips: MIN,MAX seconds")
    ap.add_argument("--max-seconds", type=float, help="place no clip after this point")
    ap.add_argument("--vad", help="also run every setting with `listen --vad VAD`")
    ap.add_argument("--vad-thresholds", default="0.5",
                    help="with --vad: listen's --vad-threshold values, comma-separated")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wav = os.path.join(a.out, "stream.wav")
    gap = tuple(float(g) for g in a.gap.split(","))
    placed, seconds = build(os.path.join(REPO, "data/corpus/kws"), os.path.join(REPO, "data/corpus/asr"),
                            a.seed, wav, gap, a.max_seconds)
    with open(os.path.join(a.out, "stream.json"), "w") as f:
        json.dump({"seconds": seconds, "events": placed}, f, indent=1)
    hours = seconds / 3600
    print(f"recording: {seconds:.0f} s, {len(placed)} clips "
          f"({sum(e['kind'] == 'keyword' for e in placed)} keywords)")
    results = []
    gates = [None] + ([(a.vad, t) for t in a.vad_thresholds.split(",")] if a.vad else [])
    for model in a.models.split(","):
        for th, smooth in [(t, s) for t in a.thresholds.split(",") for s in a.smooth_ms.split(",")]:
            ungated = None
            for vad in gates:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                run = subprocess.run([a.hush_device, "listen", "--model", model, "--input", wav,
                                      "--threshold", th, "--smooth-ms", smooth]
                                     + (["--hop-ms", a.hop_ms] if a.hop_ms else [])
                                     + (["--vad", vad[0], "--vad-threshold", vad[1]] if vad else []),
                                     check=True, capture_output=True, text=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                dets = [json.loads(l) for l in run.stdout.splitlines()]
                r = {"model": model, "threshold": float(th), "smooth_ms": int(smooth),
                     "hop_ms": a.hop_ms and int(a.hop_ms),
                     "vad": vad and vad[0], "vad_threshold": vad and float(vad[1]),
                     "cpu_s": cpu, "cpu_ms_per_audio_s": 1000 * cpu / seconds,
                     "summary": run.stderr.strip().splitlines()[-1],
                     **score(placed, dets, hours)}
                if vad is None:
                    ungated = r
                else:
                    lost = sorted(set(ungated["hit_clips"]) - set(r["hit_clips"]))
                    r["lost_to_gate"] = len(lost)
                    r["cpu_vs_ungated"] = cpu / ungated["cpu_s"]
                results.append(r)
                gate = f", --vad at {vad[1]}: {r['lost_to_gate']} keywords lost to the gate, " \
                    f"CPU x{r['cpu_vs_ungated']:.3f}" if vad else ""
                print(f"{model} @ {th}, smoothing {smooth} ms: recall {r['recall']:.3f} ({r['hits']}/{r['keywords']}), "
                      f"false alarms {r['false_alarms']} ({r['false_alarms_per_hour']:.1f}/h, "
                      f"near: {r['false_alarms_by_context']}), "
                      f"keyword in a sentence {r['keyword_in_a_sentence']}, "
                      f"CPU {r['cpu_s']:.2f} s ({r['cpu_ms_per_audio_s']:.2f} ms per s of audio){gate}")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"seconds": seconds, "seed": a.seed, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
