"""Tables of the privacy-audit experiment (experiments/privacy_audit.sh): every row's ε lower
bound over its seeds (mean ± sd, min, max) beside the ε claimed, into table.md and
results.json of the docs folder. A claim is refuted when the bound exceeds the tightest ε
the run reports (PLD where it computed one, else RDP), as `AuditOutcome::claim_refuted`
says. Usage: privacy_audit_table.py SOURCE... DOCS_DIR, each SOURCE an OUT_DIR of runs or a
results.json of runs recorded before (e.g. DOCS_DIR/results.json, to rebuild the tables);
a row found in a later source replaces the same row of an earlier one."""
import json
import statistics
import sys
from pathlib import Path

sources, docs = [Path(a) for a in sys.argv[1:-1]], Path(sys.argv[-1])


def tightest(rdp, pld):
    if rdp is None:
        return None
    return rdp if pld is None else min(rdp, pld)


def recorded(path):
    rows = {}
    for name, summary in json.loads(path.read_text()).items():
        rows[name] = summary["runs"]
        for r in rows[name]:
            t = tightest(r["claimed_rdp"], r["claimed_pld"])
            r["refuted"] = t is not None and r["bound"] > t
    return rows


def ran(out):
    rows = {}
    for path in sorted(out.glob("*/*/seed*/results.json")):
        r = json.loads(path.read_text())
        name = f"{path.parts[-4]}/{path.parts[-3]}"
        t = tightest(r["claim"]["epsilon_rdp"], r["claim"]["epsilon_pld"])
        rows.setdefault(name, []).append(
            {
                "seed": r["settings"]["audit"]["seed"],
                "canaries": len(r["scores"]),
                "claimed_rdp": r["claim"]["epsilon_rdp"],
                "claimed_pld": r["claim"]["epsilon_pld"],
                "bound": r["bound"]["epsilon"],
                "guesses": r["bound"]["guesses"],
                "correct": r["bound"]["correct"],
                "fault": r["fault"],
                "one_shot": r.get("one_shot") and r["one_shot"]["epsilon"],
                "refuted": t is not None and r["bound"]["epsilon"] > t,
            }
        )
    return rows


rows = {}
for source in sources:
    rows.update(recorded(source) if source.is_file() else ran(source))


def fmt(xs):
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{statistics.mean(xs):.2f} ± {statistics.stdev(xs):.2f}"


lines = [
    "| run | canaries | fault | ε claimed (RDP / PLD) | ε lower bound, 95 % (mean ± sd) | min – max | claim refuted (over the PLD ε, else RDP) | one-shot estimate (not a bound) | seeds |",
    "|---|---|---|---|---|---|---|---|---|",
]
summary = {}
for name, runs in rows.items():
    bounds = [r["bound"] for r in runs]
    claimed = runs[0]["claimed_rdp"]
    pld = runs[0]["claimed_pld"]
    if claimed is None:
        claim = "none (DP off)"
    else:
        claim = f"{claimed:.2f} / " + ("—" if pld is None else f"{pld:.2f}")
    refuted = sum(r["refuted"] for r in runs)
    shots = [r["one_shot"] for r in runs if r["one_shot"] is not None]
    shot = fmt(shots) if shots else "—"
    lines.append(
        f"| {name} | {runs[0]['canaries']} | {runs[0]['fault'] or '—'} | {claim} | "
        f"{fmt(bounds)} | {min(bounds):.2f} – {max(bounds):.2f} | {refuted} of {len(runs)} | "
        f"{shot} | {len(runs)} |"
    )
    summary[name] = {"runs": runs, "bound_mean": statistics.mean(bounds)}
(docs / "table.md").write_text("\n".join(lines) + "\n")
(docs / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
print("\n".join(lines))
