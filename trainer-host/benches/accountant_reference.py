#!/usr/bin/env python3
"""Times dp-accounting 0.6.0 on the accountant golden cases (accountant-goldens.md section 1).

Prints one line per (case, accountant): "<case> <rdp|pld> <median seconds> <epsilon>".
Run by benches/accountant.rs when HUSH_BENCH_PYTHON is set; needs `pip install dp-accounting==0.6.0`.
"""
import statistics
import time

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant as pld_mod
from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod

CASES = [
    ("A", 0.01, 1.1, 10000, 1e-5),
    ("B", 0.001, 0.8, 1000, 1e-5),
    ("C", 1.0, 5.0, 100, 1e-5),
    ("D", 0.05, 2.0, 2000, 1e-5),
    ("E", 1024 / 1e6, 1.0, 2000, 1e-9),
    ("F", 1024 / 1e7, 0.5, 2000, 1e-9),
]


def event(q, sigma, steps):
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)


def median_time(reps, fn):
    times, last = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        last = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), last


def rdp_eps(q, sigma, steps, delta):
    acc = rdp_mod.RdpAccountant()
    acc.compose(event(q, sigma, steps))
    return acc.get_epsilon(delta)


def pld_eps(q, sigma, steps, delta):
    acc = pld_mod.PLDAccountant()
    acc.compose(event(q, sigma, steps))
    return acc.get_epsilon(delta)


for name, q, sigma, steps, delta in CASES:
    t, e = median_time(11, lambda: rdp_eps(q, sigma, steps, delta))
    print(f"{name} rdp {t!r} {float(e)!r}", flush=True)
for name, q, sigma, steps, delta in CASES:
    t, e = median_time(3, lambda: pld_eps(q, sigma, steps, delta))
    print(f"{name} pld {t!r} {float(e)!r}", flush=True)
