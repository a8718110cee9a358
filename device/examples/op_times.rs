//! Where a model's window goes, op by op: loads a keyword spotter's `model.onnx` as the
//! device does (`hush_tract_ops::optimize`: tract's passes with hush's ops swapped in),
//! runs it on a fixed window `HUSH_OP_REPS` times (default 400) and prints each node's
//! median time, slowest first, with the sum of the medians and the median of whole runs
//! (timed without the per-node timing, in between). It keeps freed memory as the
//! device binary does (`keep_freed_inference_memory`); `HUSH_OP_GLIBC_DEFAULTS=1` runs
//! with glibc's defaults instead.
//!
//! ```text
//! cargo run --release -p hush-device --example op_times -- MODEL.onnx [FRAMES BINS]
//! cargo run --release -p hush-device --example op_times -- --pulsed PACKAGE PULSE
//! ```
//!
//! The window is `[1, FRAMES, BINS]` (default `[1, 98, 40]`, the `infer` bench's). With
//! `--pulsed`, it is a keyword spotter package's trunk pulsed `PULSE` frames at a time, as
//! `listen` runs it (`listen`'s default hop is 6 frames for `models/kws-12`), one state
//! run over and over: what a hop of listening costs in the model's trunk. Timing every
//! node adds a little to each; the bench (`benches/infer.rs`) times whole windows.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::plan::{eval, SimpleState};

fn main() -> Result<()> {
    if std::env::var_os("HUSH_OP_GLIBC_DEFAULTS").is_none() {
        hush_models::compute::keep_freed_inference_memory();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = match std::env::var("HUSH_OP_REPS") {
        Ok(v) => v.parse().context("HUSH_OP_REPS: a number of runs")?,
        Err(_) => 400,
    };
    if let [flag, dir, pulse] = args.as_slice() {
        if flag == "--pulsed" {
            return pulsed(
                dir,
                pulse.parse().context("PULSE: a number of frames")?,
                reps,
            );
        }
    }
    let (path, frames, bins) = match args.as_slice() {
        [path] => (path, 98, 40),
        [path, frames, bins] => (path, frames.parse()?, bins.parse()?),
        _ => bail!("usage: op_times MODEL.onnx [FRAMES BINS] | op_times --pulsed PACKAGE PULSE"),
    };
    let model = tract_onnx::onnx()
        .model_for_path(path)?
        .with_input_fact(0, f32::fact([1, frames, bins]).into())?
        .into_typed()?;
    let (model, swapped) = hush_tract_ops::optimize(model)?;
    println!("{path}: [1, {frames}, {bins}], {reps} runs; hush's ops: {swapped:?}");
    let plan = Arc::new(model.into_runnable()?);
    time_plan(&plan, frames, bins, reps)
}

/// The keyword spotter package `dir`'s trunk pulsed `pulse` frames at a time, as `listen`
/// runs it (its host-made archive, or pulsed here), one state run `reps` times.
fn pulsed(dir: &str, pulse: usize, reps: usize) -> Result<()> {
    let clf = hush_device::infer::KwsClassifier::load_for_streams(std::path::Path::new(dir))?;
    let form = clf
        .stream_form()
        .context("the package has no streaming form")?;
    let trunk = form
        .pulsed_trunk(pulse)?
        .context("no trunk pulsed for that many frames")?;
    let bins = clf.card().arch.io().bins;
    println!("{dir}: its trunk pulsed [1, {pulse}, {bins}], {reps} runs");
    time_plan(&trunk.plan, pulse, bins, reps)
}

/// Runs `plan` on a fixed `[1, frames, bins]` input `reps` times in one state, and prints
/// each node's median time, slowest first, their sum and the median of whole runs.
fn time_plan(
    plan: &Arc<TypedRunnableModel>,
    frames: usize,
    bins: usize,
    reps: usize,
) -> Result<()> {
    let model = plan.model();
    let mut state = SimpleState::new(plan)?;
    let window = tract_ndarray::Array3::from_shape_fn((1, frames, bins), |(_, t, f)| {
        ((t * bins + f) % 17) as f32 / 17.0 - 0.5
    });
    let window: Tensor = window.into();
    let mut times: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        state.run(tvec!(window.clone().into()))?;
        runs.push(start.elapsed().as_secs_f64() * 1e6);
        state.run_plan_with_eval(tvec!(window.clone().into()), |ctx, st, node, inputs| {
            let start = Instant::now();
            let out = eval(ctx, st, node, inputs);
            let us = start.elapsed().as_secs_f64() * 1e6;
            times.entry(node.id).or_default().push(us);
            out
        })?;
    }
    runs.sort_by(f64::total_cmp);
    let mut rows: Vec<(f64, usize)> = times
        .iter_mut()
        .map(|(&id, t)| {
            t.sort_by(f64::total_cmp);
            (t[t.len() / 2], id)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for &(us, id) in &rows {
        let node = model.node(id);
        let info = node.op.info()?.join("; ");
        println!("{us:9.1} us  {:4} {:24} {info}", id, node.op.name());
    }
    let total: f64 = rows.iter().map(|r| r.0).sum();
    println!("{total:9.1} us  sum of the medians");
    // The whole plan, untimed op by op (run between the timed runs): what the ops' medians
    // leave out is tract's work between ops (allocating, dropping, moving values).
    println!("{:9.1} us  median of whole runs", runs[runs.len() / 2]);
    Ok(())
}
