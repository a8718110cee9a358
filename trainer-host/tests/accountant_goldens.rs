//! Accountants against golden values from dp-accounting 0.6.0 and tensorflow/privacy's
//! pate_2018 (see tests/fixtures/accountant/README.md).

use hush_host::accountant::{
    analytic_gaussian, calibrate, pate, rdp, Accountant, Adjacency, SubsampledGaussian,
};
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn goldens() -> Result<Value, Box<dyn std::error::Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/accountant/goldens.json"
    );
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default()
}

fn assert_rel(got: f64, want: f64, rel: f64, what: &str) {
    let err = if want == 0.0 {
        got.abs()
    } else {
        ((got - want) / want).abs()
    };
    assert!(
        err <= rel,
        "{what}: got {got:e}, want {want:e} (rel err {err:e})"
    );
}

#[test]
fn rdp_epsilon_and_optimal_order_match_dp_accounting() -> TestResult {
    let g = goldens()?;
    let orders = rdp::default_orders();
    for c in g["cases"].as_array().ok_or("cases")? {
        let name = c["name"].as_str().unwrap_or("?");
        let event = SubsampledGaussian::poisson(f(c, "q"), f(c, "sigma"), u(c, "steps"))?;
        let r = event.epsilon(Accountant::Rdp, Adjacency::AddRemove, f(c, "delta"))?;
        assert_rel(r.epsilon, f(c, "rdp_eps"), 1e-9, &format!("{name} RDP eps"));
        assert_eq!(r.optimal_order, Some(f(c, "rdp_order")), "{name} order");
        let total = event.rdp(Adjacency::AddRemove, &orders)?;
        let (classic, _) = rdp::epsilon_from_rdp_classic(&orders, &total, f(c, "delta"));
        assert_rel(
            classic,
            f(c, "rdp_eps_classic"),
            1e-9,
            &format!("{name} classic"),
        );
    }
    Ok(())
}

#[test]
fn per_step_rdp_matches_dp_accounting() -> TestResult {
    let g = goldens()?;
    let orders = floats(&g["per_step_orders"]);
    for c in g["cases"].as_array().ok_or("cases")? {
        let name = c["name"].as_str().unwrap_or("?");
        let got = rdp::poisson_subsampled_gaussian(f(c, "q"), f(c, "sigma"), &orders);
        for ((a, g), w) in orders.iter().zip(got).zip(floats(&c["per_step_rdp"])) {
            assert_rel(g, w, 1e-9, &format!("{name} alpha={a}"));
        }
    }
    Ok(())
}

#[test]
fn pld_add_remove_within_1e3_and_above_exact_gaussian() -> TestResult {
    let g = goldens()?;
    for c in g["cases"].as_array().ok_or("cases")? {
        let name = c["name"].as_str().unwrap_or("?");
        let event = SubsampledGaussian::poisson(f(c, "q"), f(c, "sigma"), u(c, "steps"))?;
        let r = event.epsilon(Accountant::Pld, Adjacency::AddRemove, f(c, "delta"))?;
        let want = f(c, "pld_eps");
        eprintln!(
            "{name}: PLD eps {} golden {want} diff {:e}",
            r.epsilon,
            r.epsilon - want
        );
        assert!(
            (r.epsilon - want).abs() < 1e-3,
            "{name}: {} vs {want}",
            r.epsilon
        );
        if f(c, "q") == 1.0 {
            let exact = analytic_gaussian::composed_gaussian_epsilon(
                f(c, "sigma"),
                u(c, "steps"),
                f(c, "delta"),
            );
            let a = &g["analytic_gaussian_case_c"];
            assert_rel(exact, f(a, "eps"), 1e-9, "analytic Gaussian");
            assert!(
                r.epsilon >= exact,
                "{name}: PLD {} below exact {exact}",
                r.epsilon
            );
        }
    }
    Ok(())
}

#[test]
fn pld_replace_one_within_1e3() -> TestResult {
    let g = goldens()?;
    for c in g["cases"].as_array().ok_or("cases")? {
        let name = c["name"].as_str().unwrap_or("?");
        let event = SubsampledGaussian::poisson(f(c, "q"), f(c, "sigma"), u(c, "steps"))?;
        let r = event.epsilon(Accountant::Pld, Adjacency::ReplaceOne, f(c, "delta"))?;
        let want = f(c, "pld_eps_replace_one");
        eprintln!(
            "{name}: PLD replace-one eps {} golden {want} diff {:e}",
            r.epsilon,
            r.epsilon - want
        );
        assert!(
            (r.epsilon - want).abs() < 1e-3,
            "{name}: {} vs {want}",
            r.epsilon
        );
        // RDP refuses Poisson under replace-one, as dp_accounting does.
        assert!(event
            .epsilon(Accountant::Rdp, Adjacency::ReplaceOne, f(c, "delta"))
            .is_err());
    }
    Ok(())
}

#[test]
fn fixed_size_sampling_matches_wang_balle_kasiviswanathan() -> TestResult {
    let g = goldens()?;
    for c in g["fixed_size"].as_array().ok_or("fixed_size")? {
        let name = c["name"].as_str().unwrap_or("?");
        let event = SubsampledGaussian::fixed_size(
            u(c, "population"),
            u(c, "batch"),
            f(c, "sigma"),
            u(c, "steps"),
        )?;
        let r = event.epsilon(Accountant::Rdp, Adjacency::ReplaceOne, f(c, "delta"))?;
        assert_rel(r.epsilon, f(c, "rdp_eps_replace_one"), 1e-9, name);
        // Never silently Poisson: add/remove and PLD are refused.
        assert!(event
            .epsilon(Accountant::Rdp, Adjacency::AddRemove, f(c, "delta"))
            .is_err());
        assert!(event
            .epsilon(Accountant::Pld, Adjacency::ReplaceOne, f(c, "delta"))
            .is_err());
    }
    Ok(())
}

#[test]
fn calibration_matches_dp_accounting() -> TestResult {
    let g = goldens()?;
    for c in g["calibration"].as_array().ok_or("calibration")? {
        let name = c["name"].as_str().unwrap_or("?");
        for (acc, key) in [
            (Accountant::Rdp, "sigma_rdp"),
            (Accountant::Pld, "sigma_pld"),
        ] {
            let s = calibrate::calibrate_noise_multiplier(
                acc,
                Adjacency::AddRemove,
                f(c, "eps"),
                f(c, "delta"),
                f(c, "q"),
                u(c, "steps"),
                1e-4,
            )?;
            let want = f(c, key);
            eprintln!("{name} {acc}: sigma {s} golden {want} diff {:e}", s - want);
            assert!((s - want).abs() < 1e-3, "{name} {acc}: {s} vs {want}");
        }
    }
    Ok(())
}

#[test]
fn pate_gnmax_and_threshold_match_pate_2018() -> TestResult {
    let g = goldens()?;
    let p = &g["pate"];
    let orders = floats(&p["orders"]);
    let sigma = f(p, "sigma");
    let indep = pate::rdp_data_independent_gaussian(sigma, &orders);
    for (a, b) in indep.iter().zip(floats(&p["data_independent_rdp"])) {
        assert_rel(*a, b, 1e-9, "data-independent");
    }
    let t100 = &p["threshold_100_30"];
    let t200 = &p["threshold_200_150"];
    for name in ["P1", "P2", "P3"] {
        let votes = floats(&p["votes"][name]);
        let logq = pate::compute_logq_gaussian(&votes, sigma);
        assert_rel(logq, f(&p["logq"], name), 1e-9, &format!("{name} logq"));
        let r = pate::rdp_gaussian(logq, sigma, &orders)?;
        for ((o, got), want) in orders.iter().zip(r).zip(floats(&p["rdp"][name])) {
            assert_rel(got, want, 1e-9, &format!("{name} rdp at {o}"));
        }
        let lpa = pate::compute_logpr_answered(f(t100, "threshold"), f(t100, "sigma1"), &votes);
        assert_rel(
            lpa,
            f(&t100["log_pr_answered"], name),
            1e-9,
            &format!("{name} lpa"),
        );
        let rt = pate::compute_rdp_threshold(lpa, f(t100, "sigma1"), &orders)?;
        for ((o, got), want) in orders.iter().zip(rt).zip(floats(&t100["rdp"][name])) {
            assert_rel(got, want, 1e-9, &format!("{name} threshold rdp at {o}"));
        }
        let lpa = pate::compute_logpr_answered(f(t200, "threshold"), f(t200, "sigma1"), &votes);
        assert_rel(
            lpa,
            f(&t200["log_pr_answered"], name),
            1e-9,
            &format!("{name} lpa 200"),
        );
        let rt = pate::compute_rdp_threshold(lpa, f(t200, "sigma1"), &[2.0])?;
        assert_rel(
            rt[0],
            f(t200, "rdp_at_2"),
            1e-9,
            &format!("{name} threshold 200"),
        );
    }
    Ok(())
}

#[test]
fn pate_composition_of_1000_queries_matches() -> TestResult {
    let g = goldens()?;
    let p = &g["pate"];
    let c = &p["composition_1000_p1"];
    let votes = vec![floats(&p["votes"]["P1"]); 1000];
    let orders = rdp::default_orders();
    let a = pate::analyze_gnmax(&votes, f(p, "sigma"), None, f(c, "delta"), &orders, None)?;
    assert_rel(
        a.epsilon_data_dependent.0,
        f(c, "eps_data_dependent"),
        1e-9,
        "dep eps",
    );
    assert_eq!(a.epsilon_data_dependent.1, f(c, "order_data_dependent"));
    assert_rel(
        a.epsilon_data_independent.0,
        f(c, "eps_data_independent"),
        1e-9,
        "indep eps",
    );
    assert_eq!(a.epsilon_data_independent.1, f(c, "order_data_independent"));
    let (classic, order) =
        rdp::epsilon_from_rdp_classic(&orders, &a.rdp_data_dependent, f(c, "delta"));
    assert_rel(classic, f(c, "eps_data_dependent_classic"), 1e-9, "classic");
    assert_eq!(order, f(c, "order_data_dependent_classic"));
    Ok(())
}
