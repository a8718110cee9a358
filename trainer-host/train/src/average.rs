//! Stochastic weight averaging (SWA; Izmailov et al., 2018), densely as SWAD does for
//! domain generalisation (Cha et al., 2021): over the last epochs of a run the learning
//! rate is held and the weights after every step are averaged, which lands in a flatter
//! region of the loss than any one step's weights — one that moves less when the voices
//! change. Batch-norm running statistics do not average (they belong to each step's
//! weights), so they are re-estimated for the averaged weights on one pass over the
//! training clips, augmented as training augments them (as SWA's `bn_update` does with
//! the training loader): the statistics the baseline's running averages estimate too.

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use hush_models::arch::KwsModel;
use hush_models::checkpoint::NamedTensor;
use rand::seq::SliceRandom;
use rand::Rng;

use super::TrainError;

/// The running mean of a model's named tensors over the snapshots added to it.
#[derive(Debug, Default)]
pub struct WeightAverage {
    mean: Vec<NamedTensor>,
    count: usize,
}

impl WeightAverage {
    /// An empty average.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one snapshot; it must name the same tensors, in the same order and shapes, as
    /// the first.
    pub fn add(&mut self, snapshot: Vec<NamedTensor>) -> Result<(), TrainError> {
        if self.count == 0 {
            self.mean = snapshot;
            self.count = 1;
            return Ok(());
        }
        if snapshot.len() != self.mean.len() {
            return Err(mismatch(format!(
                "{} tensors where the first snapshot had {}",
                snapshot.len(),
                self.mean.len()
            )));
        }
        if let Some((m, s)) = self
            .mean
            .iter()
            .zip(&snapshot)
            .find(|(m, s)| m.name != s.name || m.shape != s.shape)
        {
            return Err(mismatch(format!(
                "{} {:?} where the first snapshot had {} {:?}",
                s.name, s.shape, m.name, m.shape
            )));
        }
        self.count += 1;
        let w = 1.0 / self.count as f64;
        for (m, s) in self.mean.iter_mut().zip(snapshot) {
            for (a, b) in m.data.iter_mut().zip(&s.data) {
                *a = (f64::from(*a) + w * (f64::from(*b) - f64::from(*a))) as f32;
            }
        }
        Ok(())
    }

    /// Snapshots added so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The mean of every snapshot added (None before the first).
    pub fn mean(&self) -> Option<&[NamedTensor]> {
        (self.count > 0).then_some(self.mean.as_slice())
    }
}

fn mismatch(reason: String) -> TrainError {
    TrainError::option("--swa-epochs", format!("weight snapshots differ: {reason}"))
}

/// Re-estimates every batch norm's running statistics of `model` as the plain mean of its
/// batch statistics over `feats` (rows of `frames × bins` features, in batches of
/// `batch`), its weights otherwise unchanged; returns the model's tensors afterwards.
/// The rows are taken in an order drawn from `rng`, so that each batch mixes classes and
/// speakers as training batches do (a corpus lists its clips class by class, and
/// one-class batches would measure only each class's spread). `device` must be an
/// autodiff device, where batch norms take their training path.
pub fn refresh_batch_norm(
    model: KwsModel,
    feats: &[f32],
    (frames, bins): (usize, usize),
    batch: usize,
    device: &Device,
    rng: &mut impl Rng,
) -> Result<Vec<NamedTensor>, TrainError> {
    let per = frames * bins;
    let mut order: Vec<usize> = (0..feats.len() / per).collect();
    order.shuffle(rng);
    let mut model = model.with_batch_statistics(true);
    for (i, rows) in order.chunks(batch.max(1)).enumerate() {
        // Momentum 1/(i+1): each running statistic becomes the mean over batches 0..=i.
        model = model.with_batch_norm_momentum(1.0 / (i + 1) as f64);
        let x: Vec<f32> = rows
            .iter()
            .flat_map(|&r| feats[r * per..(r + 1) * per].iter().copied())
            .collect();
        let x = Tensor::<3>::from_data(TensorData::new(x, [rows.len(), frames, bins]), device);
        let _ = model.forward(x);
    }
    // A running statistic's last update waits in burn's per-thread map until a sync;
    // `valid` syncs it (a plain read would give the statistics before the last batch).
    Ok(model.valid().named_tensors()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn t(name: &str, data: Vec<f32>) -> NamedTensor {
        NamedTensor::new(name, vec![data.len()], data).unwrap()
    }

    #[test]
    fn the_average_is_the_mean_of_every_snapshot() {
        let mut avg = WeightAverage::new();
        assert!(avg.mean().is_none());
        for s in [[1.0, -2.0], [2.0, 0.0], [6.0, 8.0]] {
            avg.add(vec![t("w", s.to_vec()), t("b", vec![s[0]])])
                .unwrap();
        }
        let m = avg.mean().unwrap();
        assert_eq!(avg.count(), 3);
        assert_eq!(m[0].data, vec![3.0, 2.0]);
        assert_eq!(m[1].data, vec![3.0]);
    }

    fn ds_cnn(device: &Device) -> KwsModel {
        let io = hush_models::arch::IoShape {
            frames: 49,
            bins: 20,
            classes: 12,
        };
        device.seed(1);
        hush_models::arch::ArchConfig::default_for("ds-cnn-s", io)
            .unwrap()
            .init(device)
            .unwrap()
    }

    fn autodiff() -> Device {
        crate::device(hush_models::compute::ComputeKind::Cpu).autodiff()
    }

    fn get(t: &[NamedTensor], name: &str) -> Vec<f32> {
        t.iter().find(|x| x.name == name).unwrap().data.clone()
    }

    #[test]
    fn batch_norm_statistics_become_the_mean_over_the_batches() {
        let device = autodiff();
        let model = ds_cnn(&device);
        // 24 rows of deterministic values in [-1, 1).
        let feats: Vec<f32> = (0..24 * 49 * 20)
            .map(|i: usize| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let three =
            refresh_batch_norm(model.clone(), &feats, (49, 20), 8, &device, &mut rng).unwrap();
        let one = refresh_batch_norm(model, &feats, (49, 20), 24, &device, &mut rng).unwrap();
        // No batch norm comes before bn1, so the mean of its three batch means is the mean
        // of one batch of all 24 rows (a fixed momentum would weight the last batch most).
        let (a, b) = (
            get(&three, "bn1.running_mean"),
            get(&one, "bn1.running_mean"),
        );
        assert!(
            a.iter().any(|v| v.abs() > 1e-3),
            "the statistics moved: {a:?}"
        );
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
        // The weights themselves are untouched.
        assert_eq!(get(&three, "bn1.gamma"), get(&one, "bn1.gamma"));
    }

    #[test]
    fn batches_mix_rows_that_come_grouped() {
        // 12 rows about +2, then 12 about -2: batches of 12 in the given order would each
        // see one group and measure only its spread.
        let device = autodiff();
        let model = ds_cnn(&device);
        let feats: Vec<f32> = (0..24 * 49 * 20)
            .map(|i: usize| {
                let offset = if i < 12 * 49 * 20 { 2.0 } else { -2.0 };
                offset + ((i * 7919) % 1000) as f32 / 1000.0 - 0.5
            })
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mixed =
            refresh_batch_norm(model.clone(), &feats, (49, 20), 12, &device, &mut rng).unwrap();
        let whole = refresh_batch_norm(model, &feats, (49, 20), 24, &device, &mut rng).unwrap();
        let (a, b) = (
            get(&mixed, "bn1.running_var"),
            get(&whole, "bn1.running_var"),
        );
        let (sa, sb) = (a.iter().sum::<f32>(), b.iter().sum::<f32>());
        assert!(sa > 0.7 * sb && sa < 1.1 * sb, "{sa} vs {sb}");
    }

    #[test]
    fn a_snapshot_of_other_tensors_is_refused() {
        let mut avg = WeightAverage::new();
        avg.add(vec![t("w", vec![1.0, 2.0])]).unwrap();
        let err = avg.add(vec![t("v", vec![1.0, 2.0])]).unwrap_err();
        assert!(
            err.to_string()
                .contains("v [2] where the first snapshot had w [2]"),
            "{err}"
        );
        let err = avg.add(vec![t("w", vec![1.0, 2.0, 3.0])]).unwrap_err();
        assert!(err.to_string().contains("w [3]"), "{err}");
        assert!(avg.add(vec![]).is_err());
        // A refused snapshot leaves the average as it was.
        assert_eq!(avg.count(), 1);
        assert_eq!(avg.mean().unwrap()[0].data, vec![1.0, 2.0]);
    }
}
