//! PATE's teacher ensemble on the bundled corpus: speaker-disjoint parts, a resumable run,
//! and one vote per teacher per query.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

use hush_device::dataset::KwsLabels;
use hush_device::infer::clip_samples;
use hush_host::demo::small_kws_config;
use hush_host::pate::{teacher_votes, train_teachers, Partition, PARTITION_JSON};
use hush_host::train::data::load_kws;

#[test]
fn teachers_are_speaker_disjoint_resumable_and_vote_once_each() {
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
}
