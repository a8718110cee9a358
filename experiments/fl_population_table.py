"""Summarises experiments/fl_population.sh: results.json and table.md in docs/results/fl-population/.

usage: python3 experiments/fl_population_table.py OUT DOCS

OUT holds one folder per run (ROW-sSEED/results.json, written by `hush-host simulate`) and
tune/ (the pilots, scored on validation users only). For each row: the test users' accuracy
and balanced keyword accuracy (scored once per run, at the end), mean ± sd over seeds and a
95 % t interval; ε as the host's ledger holds it (RDP and PLD, user level, δ as run).
"""

import json
import math
import pathlib
import re
import shutil
import statistics
import sys

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
# Table order: the baseline, the reference DP row, its variants, then the other budgets.
ORDER = ["nonprivate", "eps4-flat-fedavg", "eps4-perlayer-norm-fedavg", "eps4-flat-fedadam",
         "eps4-flat-lamb", "eps4-flat-lamb-retuned", "eps2-flat-fedavg", "eps8-flat-fedavg"]
# Differences in test accuracy, paired by seed (the same seed draws the same cohorts).
PAIRS = [("nonprivate", "eps4-flat-fedavg"), ("eps4-flat-fedadam", "eps4-flat-fedavg")]


def interval(xs):
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, None, None
    sd = statistics.stdev(xs)
    h = T95.get(len(xs) - 1, 1.96) * sd / math.sqrt(len(xs))
    return m, sd, (m - h, m + h)


def main(out, docs):
    runs = {}
    for d in sorted(out.iterdir()):
        m = re.fullmatch(r"(.+)-s(\d+)", d.name)
        if not (m and (d / "results.json").exists()):
            continue
        r = json.loads((d / "results.json").read_text())
        runs.setdefault(m.group(1), []).append((int(m.group(2)), r, d))
    rows = []
    names = sorted(runs, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    for name in names:
        rs = sorted(runs[name], key=lambda x: x[0])
        acc = [r["test"]["accuracy"] for _, r, _ in rs]
        bal = [r["test"]["balanced_keyword_accuracy"] for _, r, _ in rs]
        val = [r["curve"][-1]["accuracy"] for _, r, _ in rs]
        eps = {}
        for _, r, _ in rs:
            for e in r["ledger_epsilon"]:
                eps.setdefault(e["accountant"], []).append(e["epsilon"])
        cfg = rs[0][1]["config"]["host"]
        rows.append({
            "row": name,
            "seeds": [s for s, _, _ in rs],
            "test_accuracy": acc,
            "test_balanced_keyword_accuracy": bal,
            "validation_accuracy_last": val,
            "epsilon_rdp_max": max(eps["rdp"]) if "rdp" in eps else None,
            "epsilon_pld_max": max(eps["pld"]) if "pld" in eps else None,
            "delta": cfg["budget"]["delta"],
            "noise_multiplier": cfg["dp"]["noise_multiplier"] if cfg["dp"]["enabled"] else None,
            "clip": cfg["dp"]["clip"],
            "rounds_released": [sum(1 for x in r["rounds"] if x.get("released_version") is not None)
                                for _, r, _ in rs],
            "updates_accepted": [r["uploads_accepted"] for _, r, _ in rs],
            "seconds": [r["seconds"] for _, r, _ in rs],
            "population": rs[0][1].get("population"),
        })
        for seed, _, d in rs:
            if seed == min(s for s, _, _ in rs) and (d / "accuracy.png").exists():
                shutil.copy(d / "accuracy.png", docs / f"{name}.png")
    pilots = {}
    tune = out / "tune"
    if tune.is_dir():
        for d in sorted(tune.iterdir()):
            f = d / "results.json"
            if f.exists():
                c = json.loads(f.read_text())["curve"]
                pilots[d.name] = sum(p["accuracy"] for p in c[-5:]) / len(c[-5:])
    chosen = {}
    env = out / "chosen.env"
    if env.exists():
        for line in env.read_text().split():
            k, v = line.split("=")
            chosen[k] = v
    differences = []
    for a, b in PAIRS:
        if a not in runs or b not in runs:
            continue
        acc = {n: {s: r["test"]["accuracy"] for s, r, _ in runs[n]} for n in (a, b)}
        seeds = sorted(set(acc[a]) & set(acc[b]))
        d = [acc[a][s] - acc[b][s] for s in seeds]
        m, sd, ci = interval(d)
        differences.append({"a": a, "b": b, "seeds": seeds, "differences": d, "mean": m,
                            "sd": sd, "interval95": ci})
    (docs / "results.json").write_text(json.dumps(
        {"rows": rows, "paired_differences": differences,
         "pilots_validation_accuracy_last5": pilots, "chosen": chosen}, indent=2))
    lines = ["| row | seeds | test accuracy | 95 % interval | balanced keyword acc. | "
             "ε RDP / PLD (δ = 1e-6, as run) | z | s per run |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        m, sd, ci = interval(row["test_accuracy"])
        b, bsd, _ = interval(row["test_balanced_keyword_accuracy"])
        acc = f"{m:.3f}" + (f" ± {sd:.3f}" if sd is not None else "")
        bal = f"{b:.3f}" + (f" ± {bsd:.3f}" if bsd is not None else "")
        ci = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "one seed"
        eps = ("∞ (not private)" if row["epsilon_rdp_max"] is None else
               f"{row['epsilon_rdp_max']:.2f} / {row['epsilon_pld_max']:.2f}")
        z = "—" if row["noise_multiplier"] is None else f"{row['noise_multiplier']:.3f}"
        secs = statistics.mean(row["seconds"])
        lines.append(f"| {row['row']} | {len(row['seeds'])} | {acc} | {ci} | {bal} | {eps} | {z} | {secs:.0f} |")
    lines += ["", "| paired by seed | seeds | difference in test accuracy | 95 % interval |",
              "|---|---|---|---|"]
    for d in differences:
        ci = (f"[{d['interval95'][0]:+.3f}, {d['interval95'][1]:+.3f}]"
              if d["interval95"] else "one seed")
        sd = f" ± {d['sd']:.3f}" if d["sd"] is not None else ""
        lines.append(f"| {d['a']} − {d['b']} | {len(d['seeds'])} | {d['mean']:+.3f}{sd} | {ci} |")
    (docs / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
