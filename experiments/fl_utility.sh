#!/usr/bin/env bash
# Utility of federated KWS training on the bundled corpus: non-private FedAvg against
# user-level DP with flat and per-layer clipping (with layer-wise normalisation), and the
# three server optimizers. Each row is one `hush-host simulate` run (about a minute on
# 2 cores once built); the table goes to experiments/results/fl_utility_table.md
# (experiments/results/fl_utility.md is that table as run, with notes).
#
#   experiments/fl_utility.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-60}"
out=out/fl_utility
mkdir -p "$out" experiments/results
cargo build -q --workspace --bins
bin=target/debug/hush-host
run() {
  local name="$1"; shift
  echo "== $name: hush-host simulate --rounds $rounds $*" >&2
  "$bin" simulate --rounds "$rounds" --out "$out/$name" "$@" > "$out/$name.log"
}
run nonprivate-fedavg --no-dp
run dp-flat-fedavg
run dp-perlayer-norm-fedavg --clipping per-layer-dim --normalize-layers
run dp-flat-fedadam --optimizer fedadam --server-lr 0.01
run dp-flat-lamb --optimizer lamb --server-lr 0.01
python3 - "$out" "$rounds" > experiments/results/fl_utility_table.md <<'PY'
import json, sys, pathlib
out, rounds = pathlib.Path(sys.argv[1]), sys.argv[2]
print(f"# Federated KWS utility on the bundled corpus ({rounds} rounds)\n")
print("Made by `experiments/fl_utility.sh " + rounds + "`: 32 devices (one per training speaker), "
      "Poisson cohorts q = 0.25, update clip 1.0, five local SGD epochs; DP rows add noise "
      "z = 2 calibrated for cohorts of 1 000 (noise-cohort simulation) and report ε "
      "extrapolated to 10⁶ devices at δ = 10⁻⁹ (user level, add/remove).\n")
print("| run | final test accuracy | best | balanced keyword acc. | ε (RDP) | ε (PLD) | updates | seconds |")
print("|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in out.iterdir() if (p / "results.json").exists()):
    r = json.loads((d / "results.json").read_text())
    curve = r["curve"]
    eps = {e["accountant"]: e["epsilon"] for e in r["deployment_epsilon"]}
    fmt = lambda k: f"{eps[k]:.3g}" if k in eps else "∞ (not private)"
    print(f"| {d.name} | {curve[-1]['accuracy']:.3f} | {max(p['accuracy'] for p in curve):.3f} | "
          f"{r['test']['balanced_keyword_accuracy']:.3f} | {fmt('rdp')} | {fmt('pld')} | "
          f"{r['uploads_accepted']} | {r['seconds']:.0f} |")
PY
cat experiments/results/fl_utility_table.md
