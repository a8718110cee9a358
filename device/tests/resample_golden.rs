//! The resampler against `scipy.signal.resample_poly` (tests/fixtures/features).
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use std::path::PathBuf;

use hush_device::audio::{read_audio, resample};
use hush_device::features::npy::read_npy_f32;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/features")
        .join(name)
}

#[test]
fn speech_22050_to_16000_agrees_with_scipy_resample_poly() {
    let a = read_audio(&fixture("speech_22k.wav")).unwrap();
    let ours = resample(&a.samples, a.sample_rate, 16_000).unwrap();
    let (theirs, shape) = read_npy_f32(&fixture("resample_poly_22k_to_16k.npy")).unwrap();
    assert_eq!(shape, vec![ours.len()]);
    // The two filters differ only in their transition bands (scipy: cut-off at Nyquist,
    // Kaiser β 5, 10 zero crossings; hush: 0.95 × Nyquist, β 8.6, 48 zero crossings), so
    // compare below 6 kHz, where both are flat, and report the full band too.
    let m = 400; // both pad with zeros; skip the edges
    let a = &ours[m..ours.len() - m];
    let b = &theirs[m..theirs.len() - m];
    let n = a.len();
    let fft = realfft::RealFftPlanner::<f64>::new().plan_fft_forward(n);
    let spec = |x: &[f32]| {
        let mut input: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
        let mut out = fft.make_output_vec();
        fft.process(&mut input, &mut out).unwrap();
        out
    };
    let (sa, sb) = (spec(a), spec(b));
    let bin_hz = 16_000.0 / n as f64;
    let (mut err, mut sig, mut err_all, mut sig_all) = (0.0, 0.0, 0.0, 0.0);
    for (k, (x, y)) in sa.iter().zip(&sb).enumerate() {
        let (e, s) = ((x - y).norm_sqr(), y.norm_sqr());
        err_all += e;
        sig_all += s;
        if k as f64 * bin_hz < 6_000.0 {
            err += e;
            sig += s;
        }
    }
    let snr = 10.0 * (sig / err).log10();
    let snr_all = 10.0 * (sig_all / err_all).log10();
    eprintln!(
        "hush vs scipy resample_poly: {snr:.1} dB below 6 kHz, {snr_all:.1} dB over the full band"
    );
    assert!(snr > 45.0, "{snr}");
    assert!(snr_all > 25.0, "{snr_all}");
}
