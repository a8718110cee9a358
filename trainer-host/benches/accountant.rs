//! Accountant benchmarks (bench binary, `harness = false`): RDP ε over dp_accounting's default
//! orders for 10 000 steps, and PLD ε for each golden case of accountant-goldens.md §1, at the
//! default discretisation (1e-4). The Python reference (dp-accounting 0.6.0) is timed on the
//! same cases by `accountant_reference.py`, which this binary runs when
//! `HUSH_BENCH_PYTHON` names a Python interpreter that has dp-accounting installed.
//!
//! ```text
//! cargo bench -p hush-host --bench accountant
//! HUSH_BENCH_PYTHON=/path/to/python cargo bench -p hush-host --bench accountant
//! ```

use std::hint::black_box;
use std::time::Instant;

use hush_host::accountant::{Accountant, Adjacency, SubsampledGaussian};

/// Golden cases: (name, q, sigma, steps, delta).
const CASES: [(&str, f64, f64, u64, f64); 6] = [
    ("A", 0.01, 1.1, 10_000, 1e-5),
    ("B", 0.001, 0.8, 1_000, 1e-5),
    ("C", 1.0, 5.0, 100, 1e-5),
    ("D", 0.05, 2.0, 2_000, 1e-5),
    ("E", 1024.0 / 1e6, 1.0, 2_000, 1e-9),
    ("F", 1024.0 / 1e7, 0.5, 2_000, 1e-9),
];

/// Median of `reps` timings of `f`, in seconds.
fn median_secs(reps: usize, mut f: impl FnMut() -> f64) -> (f64, f64) {
    let mut times = Vec::with_capacity(reps);
    let mut last = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        last = black_box(f());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], last)
}

fn eps(acc: Accountant, q: f64, sigma: f64, steps: u64, delta: f64) -> f64 {
    match SubsampledGaussian::poisson(q, sigma, steps)
        .and_then(|e| e.epsilon(acc, Adjacency::AddRemove, delta))
    {
        Ok(r) => r.epsilon,
        Err(e) => {
            eprintln!("accounting failed: {e}");
            f64::NAN
        }
    }
}

fn main() {
    println!("| case | accountant | Rust median (ms) | epsilon |");
    println!("|---|---|---|---|");
    let mut rust = Vec::new();
    for (name, q, sigma, steps, delta) in CASES {
        let (t, e) = median_secs(101, || eps(Accountant::Rdp, q, sigma, steps, delta));
        println!("| {name} | rdp | {:.4} | {e} |", t * 1e3);
        rust.push((name, "rdp", t));
    }
    let (t, e) = median_secs(101, || eps(Accountant::Rdp, 0.01, 1.1, 10_000, 1e-5));
    println!(
        "| A (10 000 steps, 156 orders) | rdp | {:.4} | {e} |",
        t * 1e3
    );
    let orders = hush_host::accountant::rdp::default_orders();
    let (frac, int): (Vec<f64>, Vec<f64>) = orders.iter().partition(|o| o.fract() != 0.0);
    for (label, subset) in [("99 fractional orders", &frac), ("57 integer orders", &int)] {
        let (t, _) = median_secs(101, || {
            hush_host::accountant::rdp::poisson_subsampled_gaussian(0.01, 1.1, subset)
                .iter()
                .sum()
        });
        println!("| A per-step RDP, {label} | rdp | {:.4} | - |", t * 1e3);
    }
    for (name, q, sigma, steps, delta) in CASES {
        let (t, e) = median_secs(5, || eps(Accountant::Pld, q, sigma, steps, delta));
        println!("| {name} | pld | {:.1} | {e} |", t * 1e3);
        rust.push((name, "pld", t));
    }

    let Ok(python) = std::env::var("HUSH_BENCH_PYTHON") else {
        println!("(set HUSH_BENCH_PYTHON to time dp-accounting 0.6.0 on the same cases)");
        return;
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/accountant_reference.py"
    );
    let out = match std::process::Command::new(&python).arg(script).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!("{script} failed: {}", String::from_utf8_lossy(&o.stderr));
            return;
        }
        Err(e) => {
            eprintln!("cannot run {python}: {e}");
            return;
        }
    };
    println!();
    println!("| case | accountant | Rust (ms) | dp-accounting 0.6.0 (ms) | Python / Rust |");
    println!("|---|---|---|---|---|");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Lines: "<case> <accountant> <seconds> <epsilon>"
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let Ok(py) = f[2].parse::<f64>() else {
            continue;
        };
        if let Some((_, _, r)) = rust.iter().find(|(n, a, _)| *n == f[0] && *a == f[1]) {
            println!(
                "| {} | {} | {:.4} | {:.4} | {:.1} |",
                f[0],
                f[1],
                r * 1e3,
                py * 1e3,
                py / r
            );
        }
    }
}
