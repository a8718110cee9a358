#!/usr/bin/env python3
"""Times onnxruntime on hush keyword-spotter ONNX files for the `infer` bench
(device/benches/infer.rs), which runs it in the same run as tract and prints the ratio.

    infer_onnxruntime.py --frames 98 --bins 40 --reps 200 ds-cnn-s=/path/model.onnx ...

Prints JSON: {"version": ..., "cpu_ms": {arch: ...}, "wall_ms": {arch: ...}}: median
milliseconds of one [1, frames, bins] run, thread CPU time and wall clock. One intra-op
thread (tract runs single-threaded), all graph optimisations, CPUExecutionProvider; 5
warm-up runs.

With --serve it loads every model, prints "ready", then for each line "ARCH REPS" on its
standard input times REPS runs of that model and prints one line of JSON, {"cpu_ms": ...,
"wall_ms": ...}: the bench alternates short blocks of tract and onnxruntime through it.
"""

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--frames", type=int, required=True)
    p.add_argument("--bins", type=int, required=True)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--serve", action="store_true", help="time blocks asked on stdin")
    p.add_argument("models", nargs="+", help="ARCH=PATH")
    a = p.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    x = np.random.default_rng(3).uniform(-0.5, 0.5, (1, a.frames, a.bins)).astype(np.float32)
    sessions = {}
    for spec in a.models:
        arch, path = spec.split("=", 1)
        s = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {s.get_inputs()[0].name: x}
        for _ in range(5):
            s.run(None, feed)
        sessions[arch] = (s, feed)
    if a.serve:
        print("ready", flush=True)
        for line in sys.stdin:
            arch, reps = line.split()
            print(json.dumps(timed(*sessions[arch], int(reps))), flush=True)
        return
    out = {"version": ort.__version__, "cpu_ms": {}, "wall_ms": {}}
    for arch, (s, feed) in sessions.items():
        for key, ms in timed(s, feed, a.reps).items():
            out[key][arch] = ms
    print(json.dumps(out))


def timed(session, feed, reps):
    """Median milliseconds of `reps` runs: {"cpu_ms": ..., "wall_ms": ...}."""
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.thread_time()
        session.run(None, feed)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    out = {}
    for key, times in (("cpu_ms", cpu), ("wall_ms", wall)):
        times.sort()
        out[key] = 1e3 * times[len(times) // 2]
    return out


if __name__ == "__main__":
    main()
