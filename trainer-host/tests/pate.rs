//! PATE: speaker-disjoint teachers, a resumable run, one vote per teacher per query, bad
//! input refused by name, the labelling cost equal to the accountant's and in the ledger
//! (with the smooth-sensitivity release and the interactive variant), and a student that
//! beats chance by far on held-out speakers.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use hush_device::dataset::{read_corpus, KwsLabels, Target};
use hush_device::infer::clip_samples;
use hush_device::infer::kws::KwsClassifier;
use hush_host::accountant::pate::smooth_sensitivity_release_cost;
use hush_host::accountant::rdp::default_orders;
use hush_host::accountant::{Accountant, Adjacency, PrivacyUnit};
use hush_host::demo::small_kws_config;
use hush_host::ledger::compose_records;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::LedgerStore;
use hush_host::pate::{
    label_public, teacher_votes, train_student, train_student_self_training, train_teachers,
    train_teachers_in_parallel, Aggregator, LabelConfig, LabelFile, Partition, SelfTraining,
    SmoothRelease, PARTITION_JSON,
};
use hush_host::train::data::load_kws;

#[test]
fn teachers_are_speaker_disjoint_resumable_and_vote_once_each() {
    let _serial = common::one_training_at_a_time();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let out = tempfile::tempdir().unwrap();
    let cfg = small_kws_config(&data, 2, 1);
    let mut trained = 0;
    let dirs = train_teachers(&cfg, 3, 7, out.path(), &mut |_, _, done| {
        trained += usize::from(!done)
    })
    .unwrap();
    assert_eq!((dirs.len(), trained), (3, 3));

    let text = std::fs::read_to_string(out.path().join(PARTITION_JSON)).unwrap();
    let partition: Partition = serde_json::from_str(&text).unwrap();
    let mut seen = BTreeSet::new();
    for speakers in &partition.teachers {
        assert!(!speakers.is_empty());
        for s in speakers {
            assert!(seen.insert(s.clone()), "{s} trains two teachers");
        }
    }
    assert_eq!(seen.len(), 40, "every private speaker trains a teacher");

    // A second run finds every teacher done and trains nothing.
    let mut again = 0;
    let dirs2 = train_teachers(&cfg, 3, 7, out.path(), &mut |_, _, done| {
        again += usize::from(!done)
    })
    .unwrap();
    assert_eq!((dirs2, again), (dirs.clone(), 0));
    // Another seed would mix two partitions in one directory: refused, naming the file.
    let e = train_teachers(&cfg, 3, 8, out.path(), &mut |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains(PARTITION_JSON), "{e}");

    // Two at a time, on threads: the same partition, every teacher trained once and
    // reported once; then resumable like the sequential run. No jobs at all is refused.
    let parallel = out.path().join("parallel");
    let mut started = Vec::new();
    let dirs3 = train_teachers_in_parallel(&cfg, 3, 7, 2, &parallel, &mut |t, n, done| {
        assert!(!done && n == 3);
        started.push(t);
    })
    .unwrap();
    started.sort();
    assert_eq!(started, vec![0, 1, 2]);
    assert!(dirs3.iter().all(|d| d.join("model.json").is_file()));
    let text3 = std::fs::read_to_string(parallel.join(PARTITION_JSON)).unwrap();
    assert_eq!(
        serde_json::from_str::<Partition>(&text3).unwrap(),
        partition
    );
    let mut again3 = 0;
    train_teachers_in_parallel(&cfg, 3, 7, 2, &parallel, &mut |_, _, done| {
        again3 += usize::from(!done)
    })
    .unwrap();
    assert_eq!(again3, 0);
    let e = train_teachers_in_parallel(&cfg, 3, 7, 0, &parallel, &mut |_, _, _| {}).unwrap_err();
    assert!(e.to_string().contains("--jobs"), "{e}");

    let labels = KwsLabels::new(&cfg.keywords);
    let clip_len = clip_samples(&cfg.features, cfg.frames);
    let clips = load_kws(&data, &labels, 16_000, clip_len).unwrap().test;
    let (votes, classes) = teacher_votes(&dirs, &clips, &mut |_, _| {}).unwrap();
    assert_eq!(classes, labels.classes);
    assert_eq!(votes.len(), clips.len());
    for v in &votes {
        assert_eq!(v.len(), 12);
        assert_eq!(v.iter().sum::<f64>(), 3.0);
    }

    // Bad input, refused with an error that names the thing.
    // More teachers than the 40 private speakers:
    let e = train_teachers(&cfg, 41, 7, &out.path().join("many"), &mut |_, _, _| {}).unwrap_err();
    assert!(
        e.to_string().contains("--teachers") && e.to_string().contains("40"),
        "{e}"
    );
    // An empty public set:
    let empty = out.path().join("empty-public");
    std::fs::create_dir_all(&empty).unwrap();
    let mut label_cfg = LabelConfig {
        teachers: out.path().to_path_buf(),
        public: empty.clone(),
        aggregator: Aggregator::GnMax { sigma: 1.0 },
        delta: 1e-5,
        ledger: out.path().join("ledger.sqlite"),
        budget_epsilon: 1e6,
        accountant: Accountant::Rdp,
        seed: Some(1),
        student: None,
        smooth: None,
    };
    let labels_out = out.path().join("labels.json");
    let e = label_public(&label_cfg, &labels_out, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("empty-public"), "{e}");
    // Inconsistent label sets: a teacher over other classes …
    let odd = out.path().join("odd");
    copy_dir(&dirs[0], &odd);
    let card = odd.join("model.json");
    let text = std::fs::read_to_string(&card).unwrap();
    std::fs::write(&card, text.replace("\"yes\"", "\"yeah\"")).unwrap();
    let mixed = [dirs[1].clone(), odd.clone()];
    let e = teacher_votes(&mixed, &clips, &mut |_, _| {}).unwrap_err();
    assert!(
        e.to_string().contains("model.json") && e.to_string().contains("yeah"),
        "{e}"
    );
    // … a student over other classes than the teachers' (interactive) …
    label_cfg.public = data.clone();
    label_cfg.aggregator = Aggregator::InteractiveGnMax {
        threshold: 2.0,
        sigma1: 1.0,
        sigma2: 1.0,
        student_confidence: 0.9,
    };
    label_cfg.student = Some(odd.clone());
    let e = label_public(&label_cfg, &labels_out, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("student's classes"), "{e}");
    // … a student asked by an aggregator that asks none …
    label_cfg.aggregator = Aggregator::GnMax { sigma: 1.0 };
    let e = label_public(&label_cfg, &labels_out, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--student"), "{e}");
    // … and labels over other classes than the student's keywords.
    label_cfg.student = None;
    label_public(&label_cfg, &labels_out, &mut |_, _| {}).unwrap();
    let file = LabelFile::read(&labels_out).unwrap();
    let mut other = small_kws_config(&data, 1, 1);
    other.keywords.pop();
    let e = train_student(&other, &file, &out.path().join("s"), "test", &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("--keywords"), "{e}");
    assert!(!labels_out.with_extension("json.partial").exists());
}

/// Copies the files of directory `src` into `dst`.
fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for f in std::fs::read_dir(src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dst.join(f.file_name().unwrap())).unwrap();
    }
}

#[test]
fn pate_end_to_end_student_beats_chance_by_far_on_held_out_speakers() {
    let _serial = common::one_training_at_a_time();
    // Private: 60 synthetic speakers (made once per target directory), three teachers of
    // 20 speakers each. Public: the bundled corpus — other speakers; its train and
    // validation clips are labelled, its 4 test speakers (60 clips) are held out from
    // teachers and student alike and judge the student.
    let Some(private) = common::cached_kws_corpus("pate-private-60", 60, 2027) else {
        return;
    };
    let public = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/corpus/kws");
    let tmp = tempfile::tempdir().unwrap();
    let cfg = small_kws_config(&private, 20, 3);
    let teachers = tmp.path().join("teachers");
    train_teachers(&cfg, 3, 0, &teachers, &mut |_, _, _| {}).unwrap();
    let ledger = tmp.path().join("ledger.sqlite");
    let smooth = SmoothRelease {
        sigma_ss: 2.0,
        beta: None,
    };
    let label_cfg = LabelConfig {
        teachers: teachers.clone(),
        public: public.clone(),
        aggregator: Aggregator::GnMax { sigma: 1.0 },
        delta: 1e-5,
        ledger: ledger.clone(),
        budget_epsilon: 1e6,
        accountant: Accountant::Rdp,
        seed: Some(5),
        student: None,
        smooth: Some(smooth),
    };
    let labels_path = tmp.path().join("labels.json");
    let report = label_public(&label_cfg, &labels_path, &mut |_, _| {}).unwrap();
    // The cost written is the accountant's for the same votes.
    let want = Aggregator::GnMax { sigma: 1.0 }
        .analyze(&report.votes, None, 1e-5, &default_orders(), None)
        .unwrap();
    let file = LabelFile::read(&labels_path).unwrap();
    assert_eq!(
        report.analysis.epsilon_data_dependent,
        want.epsilon_data_dependent
    );
    assert_eq!(
        report.file.epsilon_data_independent,
        want.epsilon_data_independent.0
    );
    // Through JSON it keeps every bit serde_json's parser keeps.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    assert!(close(
        file.epsilon_data_independent,
        want.epsilon_data_independent.0
    ));
    // The data-dependent ε is released with smooth-sensitivity noise …
    let released = file.smooth_sensitivity.unwrap();
    let private = report.analysis.smooth_sensitivity.unwrap();
    assert_eq!(released.order, want.epsilon_data_dependent.1);
    assert_eq!(released.release_rdp, private.release_rdp);
    assert!(private.noise_std > 0.0 && released.released_epsilon.is_finite());
    assert_ne!(released.released_epsilon, private.expected_epsilon(1e-5));
    // … and the cost is in the ledger, as one PATE record naming that release.
    let records = SqliteLedgerStore::open(&ledger).unwrap().records().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id, file.ledger_record);
    assert_eq!(records[0].release.event.steps, file.labels.len() as u64);
    assert!(
        records[0].release.released.contains("smooth sensitivity"),
        "{}",
        records[0].release.released
    );
    // The release's own RDP, at every analysed order where it is bounded, is the record's
    // additional cost, so the ledger's total is more than the labels' cost alone.
    let cost = smooth_sensitivity_release_cost(released.params, &default_orders()).unwrap();
    assert!(cost
        .rdp
        .iter()
        .all(|(o, _)| *o < 1.0 / (2.0 * released.params.beta)));
    assert!(cost.rdp.iter().any(|(o, _)| *o == released.order));
    assert_eq!(records[0].release.additional, cost);
    let total = compose_records(
        &records,
        Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::User,
        1e-5,
    )
    .unwrap()
    .epsilon;
    assert!(
        total > file.epsilon_data_independent + 1e-6,
        "{total} vs {}",
        file.epsilon_data_independent
    );
    assert_eq!((file.answered, file.refused), (file.labels.len(), 0));
    // … and nothing computed from the votes without noise is written: no number in the
    // labels file is the data-dependent ε, its RDP, the smooth sensitivity or the noise std,
    // and the ledger's description does not print them either.
    let text = std::fs::read_to_string(&labels_path).unwrap();
    assert!(!text.contains("data_dependent"), "{text}");
    let mut numbers = Vec::new();
    json_numbers(&serde_json::from_str(&text).unwrap(), &mut numbers);
    let raw = [
        ("data-dependent ε", want.epsilon_data_dependent.0),
        ("data-dependent RDP", private.data_dependent_rdp),
        ("smooth sensitivity", private.smooth_sensitivity),
        ("noise std", private.noise_std),
    ];
    for (what, value) in raw {
        // (At σ = 1 with 3 teachers the data-dependent bound is capped at the public,
        // data-independent one; equal to it, it reveals nothing more.)
        if value != file.epsilon_data_independent {
            assert!(
                !numbers.contains(&value),
                "{what} {value} in the labels file"
            );
        }
    }
    let ledger_text = &records[0].release.released;
    for digits in [
        format!("{:.4}", want.epsilon_data_dependent.0),
        format!("{:.3e}", private.noise_std),
    ] {
        assert!(!ledger_text.contains(&digits), "{digits} in {ledger_text}");
    }

    // The noisy labels beat chance (1/12) by far: the teachers learned something.
    let classes = KwsLabels::new(&cfg.keywords);
    let truth: std::collections::HashMap<std::path::PathBuf, &str> = read_corpus(&public)
        .unwrap()
        .1
        .into_iter()
        .filter_map(|e| match e.target {
            Target::Label(w) => Some((
                e.path.strip_prefix(&public).unwrap().to_path_buf(),
                classes.classes[classes.class_of(&w)].as_str(),
            )),
            _ => None,
        })
        .collect();
    let right = file
        .labels
        .iter()
        .filter(|l| l.label.as_deref() == truth.get(&l.file).copied())
        .count() as f64
        / file.labels.len() as f64;
    eprintln!("noisy labels right: {right:.3}");
    assert!(right > 0.45, "{right}");
    let student_cfg = small_kws_config(&public, 15, 4);
    let out = tmp.path().join("student");
    let student = train_student(&student_cfg, &file, &out, "test", &mut |_| {}).unwrap();
    let test = &student.card.metrics.as_ref().unwrap().splits["test"];
    eprintln!(
        "student on held-out speakers: accuracy {:.3} over {} clips (chance 1/12, majority \
         class 4/15)",
        test.accuracy, test.examples
    );
    // Measured 0.567 here (labels 0.594 right); a `pate run` with 30 epochs on another
    // 60-speaker corpus gave 0.650. Chance is 0.083, the majority class (`_unknown_`, 4 of
    // each speaker's 15 clips) 0.267.
    assert_eq!(test.examples, 60);
    assert!(test.accuracy > 0.45, "{}", test.accuracy);

    // An interactive round asks that student: where the teachers do not disagree with it
    // and it is confident, its own label is kept; only the queries that pass the
    // threshold pay GNMax, so the round costs less than the Confident-GNMax bound.
    let interactive = Aggregator::InteractiveGnMax {
        threshold: 1.5,
        sigma1: 0.5,
        sigma2: 1.0,
        student_confidence: 0.6,
    };
    let round2 = LabelConfig {
        aggregator: interactive,
        student: Some(out.clone()),
        smooth: None,
        ..label_cfg
    };
    let labels2 = tmp.path().join("labels-interactive.json");
    let r2 = label_public(&round2, &labels2, &mut |_, _| {}).unwrap();
    let f2 = &r2.file;
    eprintln!(
        "interactive: {} answered, {} kept from the student, {} refused",
        f2.answered, f2.kept_from_student, f2.refused
    );
    assert_eq!(
        f2.answered + f2.kept_from_student + f2.refused,
        f2.labels.len()
    );
    assert!(f2.kept_from_student > 0 && f2.answered < f2.labels.len());
    assert_eq!(
        f2.labels.iter().filter(|l| l.by_student).count(),
        f2.kept_from_student
    );
    let checks = r2.checks.as_deref().unwrap();
    let want = interactive
        .analyze(&r2.votes, Some(checks), 1e-5, &default_orders(), None)
        .unwrap();
    assert_eq!(f2.epsilon_data_independent, want.epsilon_data_independent.0);
    let bound = Aggregator::ConfidentGnMax {
        threshold: 1.5,
        sigma1: 0.5,
        sigma2: 1.0,
    }
    .analyze(&r2.votes, None, 1e-5, &default_orders(), None)
    .unwrap();
    assert!(f2.epsilon_data_independent < bound.epsilon_data_independent.0);
    let records = SqliteLedgerStore::open(&ledger).unwrap().records().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].id, f2.ledger_record);

    // Self-training on the refused clips: a first student learns from the answered (and
    // kept) labels, labels the refused clips it is confident about — exactly those whose
    // top probability reaches the bar, by the device's own (tract) classifier — and a second
    // student learns from both. The ledger is not touched.
    let refused: BTreeSet<&Path> = f2
        .labels
        .iter()
        .filter(|l| l.label.is_none())
        .map(|l| l.file.as_path())
        .collect();
    assert_eq!(refused.len(), f2.refused);
    let confidence = 0.6;
    let st = train_student_self_training(
        &student_cfg,
        f2,
        SelfTraining { confidence },
        &tmp.path().join("student-st"),
        "test",
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(st.refused, f2.refused);
    assert_eq!(st.first_dir, tmp.path().join("student-st-answered-only"));
    let pseudo: std::collections::HashMap<&Path, &str> = st
        .pseudo_labelled
        .iter()
        .map(|(f, c)| (f.as_path(), c.as_str()))
        .collect();
    assert!(pseudo.keys().all(|f| refused.contains(f)));
    let first = KwsClassifier::load(&st.first_dir).unwrap();
    let mut sure = 0;
    for f in &refused {
        let c = first.classify_file(&public.join(f)).unwrap();
        if c.score >= confidence + 1e-3 {
            assert_eq!(
                pseudo.get(f).copied(),
                Some(c.label.as_str()),
                "{}",
                f.display()
            );
            sure += 1;
        } else if c.score <= confidence - 1e-3 {
            assert!(!pseudo.contains_key(f), "{} at {}", f.display(), c.score);
        }
    }
    let test_st = &st.student.card.metrics.as_ref().unwrap().splits["test"];
    let test_first = &st.first.card.metrics.as_ref().unwrap().splits["test"];
    eprintln!(
        "self-training: {} refused, {} pseudo-labelled ({sure} clearly above {confidence}); \
         held-out accuracy {:.3} → {:.3}",
        st.refused,
        st.pseudo_labelled.len(),
        test_first.accuracy,
        test_st.accuracy
    );
    assert!(sure > 0, "no refused clip was pseudo-labelled");
    // Bad input is refused before any training, naming the option.
    for (confidence, out, option) in [
        (0.0, tmp.path().join("st2"), "--self-train-confidence"),
        (1.5, tmp.path().join("st2"), "--self-train-confidence"),
        (0.6, Path::new("..").to_path_buf(), "--out"),
    ] {
        let e = train_student_self_training(
            &student_cfg,
            f2,
            SelfTraining { confidence },
            &out,
            "test",
            &mut |_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains(option), "{e}");
    }
    assert_eq!(test_st.examples, 60);
    assert!(test_st.accuracy > 0.45, "{}", test_st.accuracy);
    assert_eq!(
        SqliteLedgerStore::open(&ledger)
            .unwrap()
            .records()
            .unwrap()
            .len(),
        2
    );
}

/// Every number in a JSON value.
fn json_numbers(v: &serde_json::Value, out: &mut Vec<f64>) {
    match v {
        serde_json::Value::Number(n) => out.extend(n.as_f64()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_numbers(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| json_numbers(x, out)),
        _ => {}
    }
}
