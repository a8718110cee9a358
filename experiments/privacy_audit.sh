#!/usr/bin/env bash
# The empirical privacy audit at full size (issue 40): `hush-host audit privacy dp-sgd`
# (5 seeds a row) and `audit privacy federated` (3 seeds a row) on the bundled KWS corpus,
# and `audit privacy pate` (5 seeds a row) on canary queries — DP on at ε = 1, 4 and 8, DP
# off, and each deliberate privacy bug at a claimed ε = 1 — and how the bound grows with the
# number of canaries. The faults need the test-only switch, so this builds hush-host with
# `--features hush-models/privacy-faults` (never a release build). Results go to
# docs/results/privacy-audit/ (table.md, results.json; each run's report.md and
# scores.png stay in out/privacy-audit/).
#
#   experiments/privacy_audit.sh        # every run (8-50 s each; the population rows ~9 min), then the table
#
# Runs whose results.json exists are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/privacy-audit
docs=docs/results/privacy-audit
mkdir -p "$out" "$docs"
# HUSH_BIN: a hush-host already built with the feature (skips the build).
if [ -z "${HUSH_BIN:-}" ]; then
  cargo build -q -p hush-host --features hush-models/privacy-faults
fi
bin=${HUSH_BIN:-target/debug/hush-host}
run() {
  local kind="$1" name="$2" fault="$3"; shift 3
  if [ -f "$out/$kind/$name/results.json" ]; then return; fi
  echo "== $kind/$name ${fault:+(HUSH_PRIVACY_FAULT=$fault)}: audit privacy $kind $*" >&2
  mkdir -p "$(dirname "$out/$kind/$name")"
  HUSH_PRIVACY_FAULT="$fault" "$bin" audit privacy "$kind" --out "$out/$kind/$name" "$@" \
    > "$out/$kind/$name.log" 2>&1
  grep "ε lower bound" "$out/$kind/$name.log" >&2
}
for seed in 1 2 3 4 5; do
  common=(--data data/corpus/kws --epochs 40 --seed "$seed")
  for eps in 1 4 8; do
    run dp-sgd "on-eps$eps/seed$seed" "" "${common[@]}" --canaries 1000 --epsilon "$eps"
  done
  run dp-sgd "off/seed$seed" "" "${common[@]}" --canaries 1000 --dp-off
  for fault in no-noise noise-0.1 no-clip; do
    run dp-sgd "$fault/seed$seed" "$fault" "${common[@]}" --canaries 1000 --epsilon 1
  done
  for m in 250 500 2000 4000; do
    run dp-sgd "on-eps4-m$m/seed$seed" "" "${common[@]}" --canaries "$m" --epsilon 4
  done
done
# The federated audit: 10 000 canary clients beside the corpus's 32 devices, q = 1, 10
# rounds (about 17 s a run); the double count also at 30 000 canaries.
for seed in 1 2 3; do
  common=(--data data/corpus/kws --rounds 10 --seed "$seed")
  for eps in 1 4 8; do
    run federated "on-eps$eps/seed$seed" "" "${common[@]}" --canaries 10000 --epsilon "$eps"
  done
  run federated "off/seed$seed" "" "${common[@]}" --canaries 10000 --dp-off
  for fault in no-noise noise-0.1 no-clip double-count; do
    run federated "$fault/seed$seed" "$fault" "${common[@]}" --canaries 10000 --epsilon 1
  done
  run federated "double-count-m30000/seed$seed" double-count "${common[@]}" --canaries 30000 \
    --epsilon 1
  for m in 1000 3000 30000; do
    run federated "on-eps4-m$m/seed$seed" "" "${common[@]}" --canaries "$m" --epsilon 4
  done
done
# The federated audit in the population simulator, with docs/results/fl-population's set-up
# (10 000 virtual users from experiments/fl_population.sh's 200-speaker corpus and cache,
# q = 0.05, 100 rounds, δ = 1e-6, 2 local epochs) and 10 000 canaries, 3 seeds; about 9
# minutes a run. Skipped when that corpus has not been made.
if [ -d out/fl-population/corpus ]; then
  for seed in 1 2 3; do
    pop=(--data out/fl-population/corpus --users 10000 --user-cache out/fl-population/virtual-users
         --canaries 10000 --sampling-rate 0.05 --rounds 100 --local-epochs 2 --delta 1e-6 --seed "$seed")
    run federated "population-on-eps4/seed$seed" "" "${pop[@]}" --epsilon 4
    run federated "population-off/seed$seed" "" "${pop[@]}" --dp-off
  done
fi
# PATE's label release: 1 000 canaries, each with a release of 1 000 queries (under a
# second a run).
for seed in 1 2 3 4 5; do
  for eps in 1 4 8; do
    run pate "on-eps$eps/seed$seed" "" --seed "$seed" --epsilon "$eps"
  done
  run pate "off/seed$seed" "" --seed "$seed" --dp-off
  for fault in no-noise noise-0.1; do
    run pate "$fault/seed$seed" "$fault" --seed "$seed" --epsilon 1
  done
  run pate "on-eps4-m10000/seed$seed" "" --seed "$seed" --epsilon 4 --canaries 10000
done
python3 experiments/privacy_audit_table.py "$out" "$docs"
