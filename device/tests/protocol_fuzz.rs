//! Fuzzing the update decoder with proptest: arbitrary bytes, and valid updates with bytes
//! flipped, cut or appended. The decoder must return (never panic), and whatever it
//! accepts must match the model's layout exactly.
#![allow(clippy::unwrap_used)]

use hush_device::protocol::{
    checksum_hex, decode_update, encode_update, LayerDelta, Update, UpdateHeader, UpdateLimits,
    UPDATE_FORMAT_VERSION,
};
use proptest::prelude::*;

fn layout() -> Vec<(String, Vec<usize>)> {
    vec![
        ("conv1.weight".into(), vec![4, 1, 3, 3]),
        ("conv1.bias".into(), vec![4]),
        ("fc.weight".into(), vec![3, 8]),
    ]
}

fn valid(values: &[f32]) -> Vec<u8> {
    let layers = layout()
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            LayerDelta {
                name,
                shape: shape.iter().map(|&d| d as u32).collect(),
                data: (0..n).map(|i| values[i % values.len()]).collect(),
            }
        })
        .collect();
    encode_update(&Update {
        header: UpdateHeader {
            format_version: UPDATE_FORMAT_VERSION,
            model_version: 2,
            round: 5,
            device_id: 9,
            idempotency_key: Update::key(5, 9),
            layer_norms: vec![0.0; 3],
        },
        layers,
    })
    .unwrap()
}

fn accepted_matches_layout(body: &[u8]) {
    let limits = UpdateLimits::for_layout(layout());
    if let Ok(u) = decode_update(body, Some(&checksum_hex(body)), &limits) {
        assert_eq!(u.layers.len(), 3);
        for (l, (name, shape)) in u.layers.iter().zip(layout()) {
            assert_eq!(l.name, name);
            assert_eq!(l.data.len(), shape.iter().product::<usize>());
            assert!(l.data.iter().all(|v| v.is_finite()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
        accepted_matches_layout(&body);
    }

    #[test]
    fn mutated_valid_updates_never_panic(
        values in proptest::collection::vec(-1e3f32..1e3, 1..8),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut body = valid(&values);
        for (at, byte) in flips {
            let i = at % body.len();
            body[i] ^= byte;
        }
        body.truncate(cut % (body.len() + 1));
        body.extend(tail);
        accepted_matches_layout(&body);
    }
}

#[test]
fn a_valid_update_decodes() {
    let body = valid(&[0.5, -0.25]);
    let limits = UpdateLimits::for_layout(layout());
    assert!(decode_update(&body, Some(&checksum_hex(&body)), &limits).is_ok());
}
