//! Virtual users (`hush_host::population`) built from the bundled corpus's base speakers:
//! deterministic, cached and reused, held-out users disjoint from training users and their
//! base voices, clip counts and non-IID classes as specified, a damaged cache refused by
//! name, and a simulation over them run from the command line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use hush_device::dataset::KwsLabels;
use hush_device::features::FeatureConfig;
use hush_host::fleet::FleetUsers;
use hush_host::population::cache::{FEATURES_FILE, INDEX_FILE};
use hush_host::population::{Population, PopulationSpec, UserSplit};
use hush_host::recipes::small_kws_config;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws")
}

fn spec(seed: u64) -> PopulationSpec {
    PopulationSpec {
        users: 48,
        validation_users: 6,
        test_users: 6,
        clips: [2, 8],
        alpha: 0.1,
        seed,
    }
}

struct Setup {
    features: FeatureConfig,
    frames: usize,
    labels: Vec<String>,
}

fn setup() -> Setup {
    let kws = small_kws_config(&corpus(), 1, 1);
    Setup {
        labels: KwsLabels::new(&kws.keywords).classes,
        features: kws.features,
        frames: kws.frames,
    }
}

fn build(cache: &Path, spec: &PopulationSpec, log: &mut Vec<String>) -> Population {
    let s = setup();
    Population::open_or_build(
        cache,
        &corpus(),
        spec,
        &s.features,
        s.frames,
        &s.labels,
        &mut |l| log.push(l.to_string()),
    )
    .expect("population builds")
}

#[test]
fn a_population_is_deterministic_cached_and_rebuilt_only_when_it_changes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let mut log = Vec::new();
    let pa = build(&a, &spec(7), &mut log);
    let pb = build(&b, &spec(7), &mut log);
    // Same seed, same corpus: the same users and the same bytes, whatever the threads did.
    assert_eq!(pa.users(), pb.users());
    let bytes = |d: &Path| std::fs::read(d.join(FEATURES_FILE)).expect("features");
    assert_eq!(bytes(&a), bytes(&b));
    assert!(!bytes(&a).is_empty());

    // Opened again with the same spec: read from the cache, not rebuilt.
    let mut again = Vec::new();
    let reopened = build(&a, &spec(7), &mut again);
    assert!(
        again.iter().any(|l| l.contains("from the cache")),
        "{again:?}"
    );
    assert!(!again.iter().any(|l| l.contains("building")), "{again:?}");
    assert_eq!(reopened.users(), pa.users());
    let first = pa.split(UserSplit::Train);
    assert_eq!(
        first.data(3).expect("user 3").features,
        reopened
            .split(UserSplit::Train)
            .data(3)
            .expect("user 3")
            .features
    );

    // Another seed: other users, and the cache is rebuilt in place.
    let mut other = Vec::new();
    let changed = build(&a, &spec(8), &mut other);
    assert!(other.iter().any(|l| l.contains("rebuilding")), "{other:?}");
    assert_ne!(changed.users(), pa.users());
    assert_ne!(bytes(&a), bytes(&b));
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&a)
        .expect("cache folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn held_out_users_share_no_base_voice_with_training_users_and_follow_the_spec() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let spec = spec(3);
    let p = build(dir.path(), &spec, &mut Vec::new());
    let users = p.users();
    assert_eq!(
        users.len(),
        spec.users + spec.validation_users + spec.test_users
    );
    let bases = |split| -> BTreeSet<&str> {
        users
            .iter()
            .filter(|u| u.split == split)
            .map(|u| u.base.as_str())
            .collect()
    };
    let (train, validation, test) = (
        bases(UserSplit::Train),
        bases(UserSplit::Validation),
        bases(UserSplit::Test),
    );
    assert!(train.is_disjoint(&validation), "{train:?} / {validation:?}");
    assert!(train.is_disjoint(&test), "{train:?} / {test:?}");
    assert!(validation.is_disjoint(&test));
    // Users go round the base speakers: every training base voice carries users (48 users
    // over fewer base speakers), and the names are unique.
    assert_eq!(train.len(), p.base_speakers()[0]);
    let names: BTreeSet<&str> = users.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names.len(), users.len());

    let s = setup();
    let per_clip = s.frames * s.features.dim();
    let fleet = p.split(UserSplit::Train);
    assert_eq!(fleet.count(), spec.users);
    for i in 0..fleet.count() {
        let d = fleet.data(i).expect("a training user's clips");
        let n = d.classes.len();
        assert!((spec.clips[0]..=spec.clips[1]).contains(&n), "{n} clips");
        assert_eq!(d.features.len(), n * per_clip);
        assert!(d.features.iter().all(|v| v.is_finite()));
        assert!(d.classes.iter().all(|&c| c < s.labels.len()));
        assert!(fleet.name(i).starts_with('u'));
    }
    // Users made from one base speaker with one take per word still differ: their voices
    // and per-clip variation make different features for the same class.
    let mut by_base: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, u) in users
        .iter()
        .enumerate()
        .filter(|(_, u)| u.split == UserSplit::Train)
    {
        by_base.entry(u.base.as_str()).or_default().push(i);
    }
    let (_, same_base) = by_base
        .iter()
        .find(|(_, v)| v.len() >= 2)
        .expect("two users of one base speaker");
    assert_ne!(users[same_base[0]].voice, users[same_base[1]].voice);

    // Non-IID: with α = 0.1 a user says few of the words. The mean share of a user's most
    // frequent class is compared with what IID users of the same clip counts get (each
    // clip's class uniform over the classes; Monte Carlo, a fixed LCG).
    let top_share = |classes: &[usize]| {
        let mut counts = vec![0usize; s.labels.len()];
        classes.iter().for_each(|&c| counts[c] += 1);
        *counts.iter().max().unwrap_or(&0) as f64 / classes.len() as f64
    };
    let train_users: Vec<_> = users
        .iter()
        .filter(|u| u.split == UserSplit::Train)
        .collect();
    let mean_top: f64 = train_users
        .iter()
        .map(|u| top_share(&u.classes))
        .sum::<f64>()
        / train_users.len() as f64;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform_class = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((state >> 33) % s.labels.len() as u64) as usize
    };
    let reps = 200;
    let mut iid = 0.0;
    for u in &train_users {
        for _ in 0..reps {
            let classes: Vec<usize> = u.classes.iter().map(|_| uniform_class()).collect();
            iid += top_share(&classes);
        }
    }
    let iid = iid / (reps * train_users.len()) as f64;
    assert!(
        mean_top > iid + 0.2,
        "mean top-class share {mean_top}, IID users of the same sizes {iid}"
    );

    // The pooled held-out sets are their users' clips.
    let validation = p.pooled(UserSplit::Validation).expect("validation users");
    let expected: usize = users
        .iter()
        .filter(|u| u.split == UserSplit::Validation)
        .map(|u| u.classes.len())
        .sum();
    assert_eq!(validation.len(), expected);
}

#[test]
fn a_damaged_cache_is_refused_by_name_and_a_bad_spec_before_any_work() {
    let dir = tempfile::tempdir().expect("temporary directory");
    build(dir.path(), &spec(1), &mut Vec::new());
    let features = dir.path().join(FEATURES_FILE);
    let len = std::fs::metadata(&features).expect("features").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&features)
        .expect("open");
    f.set_len(len - 4).expect("truncate");
    let s = setup();
    let err = Population::open_or_build(
        dir.path(),
        &corpus(),
        &spec(1),
        &s.features,
        s.frames,
        &s.labels,
        &mut |_| {},
    )
    .expect_err("a truncated features file is refused")
    .to_string();
    assert!(
        err.contains(FEATURES_FILE) && err.contains("damaged"),
        "{err}"
    );

    for (bad, says) in [
        (
            PopulationSpec {
                clips: [5, 2],
                ..spec(1)
            },
            "clips per user",
        ),
        (
            PopulationSpec {
                alpha: 0.0,
                ..spec(1)
            },
            "Dirichlet alpha",
        ),
        (
            PopulationSpec {
                test_users: 0,
                ..spec(1)
            },
            "at least one",
        ),
    ] {
        let empty = dir.path().join("never");
        let err = Population::open_or_build(
            &empty,
            &corpus(),
            &bad,
            &s.features,
            s.frames,
            &s.labels,
            &mut |_| {},
        )
        .expect_err("a bad spec is refused")
        .to_string();
        assert!(err.contains(says), "{err}");
        assert!(!empty.exists(), "work started for a bad spec");
    }
    // The index is still the one written: nothing was overwritten by the refused opens.
    assert!(dir.path().join(INDEX_FILE).exists());
}

/// `hush-host simulate` over 40 small virtual users of the bundled corpus, writing to
/// `out` (its cache in `cache`), with `extra` flags; stdout of a successful run.
fn simulate_small_users(out: &Path, cache: &Path, extra: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["simulate", "--users", "40", "--validation-users", "5"])
        .args(["--test-users", "5", "--user-clips", "2,6"])
        .args(extra)
        .arg("--data")
        .arg(corpus())
        .arg("--user-cache")
        .arg(cache)
        .arg("--out")
        .arg(out)
        .output()
        .expect("hush-host runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

fn results(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
        .expect("json")
}

#[test]
fn simulate_runs_a_fleet_of_virtual_users_and_reports_them() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (out_dir, cache) = (dir.path().join("run"), dir.path().join("users"));
    let stdout = simulate_small_users(
        &out_dir,
        &cache,
        &["--rounds", "2", "--sampling-rate", "0.2", "--seed", "5"],
    );
    assert!(
        stdout.contains("virtual users: 40 training, 5 validation, 5 test"),
        "{stdout}"
    );
    assert!(stdout.contains("test users, scored once"), "{stdout}");
    let r = results(&out_dir);
    assert_eq!(r["devices"], 40);
    assert_eq!(r["curve_on"], "validation users");
    assert_eq!(r["population"]["users"], serde_json::json!([40, 5, 5]));
    assert!(r["test"]["accuracy"].is_number(), "{}", r["test"]);
    assert!(cache.join(INDEX_FILE).exists());

    // A tuning run never scores the test users; it reuses the cache.
    let tuning_dir = dir.path().join("tuning");
    let stdout = simulate_small_users(&tuning_dir, &cache, &["--rounds", "1", "--tuning"]);
    assert!(stdout.contains("from the cache"), "{stdout}");
    assert!(
        stdout.contains("the test users were not scored"),
        "{stdout}"
    );
    let r = results(&tuning_dir);
    assert!(r["test"].is_null(), "{}", r["test"]);

    // Over HTTP, devices read their own clips from the corpus: virtual users are refused.
    let out = Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["simulate", "--users", "40", "--transport", "http", "--data"])
        .arg(corpus())
        .arg("--out")
        .arg(dir.path().join("http"))
        .output()
        .expect("hush-host runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("in process only"), "{stderr}");
}
