//! The lock-free sample ring between an audio callback and the thread that computes
//! features: a `heapless` single-producer single-consumer queue of `f32` samples.
//!
//! The producer half runs in the capture callback: it never allocates, never locks and
//! never blocks. When the consumer falls behind and the ring is full, the samples that do
//! not fit are dropped and counted ([`RingConsumer::overruns`]); nothing is hidden.
//!
//! ```
//! use hush_device::audio::sample_ring;
//! let (mut tx, mut rx) = sample_ring();
//! tx.push_interleaved(&[0.5, -0.5, 1.0, 0.0], 2); // two stereo frames -> two mono samples
//! let mut out = Vec::new();
//! assert_eq!(rx.pop_into(&mut out, usize::MAX), 2);
//! assert_eq!(out, vec![0.0, 0.5]);
//! assert_eq!(rx.overruns(), 0);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use heapless::spsc::{Consumer, Producer, Queue};

/// Slots in the ring: it holds `RING_SLOTS - 1` samples (1.36 s at 48 kHz).
pub const RING_SLOTS: usize = 1 << 16;

#[derive(Debug)]
struct Counters {
    pushed: AtomicU64,
    dropped: AtomicU64,
    overrun_events: AtomicU64,
    /// Samples stored before the first loss (`u64::MAX`: none yet).
    first_loss_at: AtomicU64,
}

/// The callback's half.
pub struct RingProducer {
    tx: Producer<'static, f32>,
    counters: Arc<Counters>,
}

/// The consumer's half.
pub struct RingConsumer {
    rx: Consumer<'static, f32>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RingProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingProducer")
            .field("counters", &self.counters)
            .finish()
    }
}

impl std::fmt::Debug for RingConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingConsumer")
            .field("len", &self.rx.len())
            .field("counters", &self.counters)
            .finish()
    }
}

/// Makes a ring and splits it. The queue (256 KiB) is allocated here, once, and lives for
/// the rest of the process (leaked: an audio callback needs a `'static` producer and the
/// workspace forbids `unsafe`), so make one ring per capture session, not per chunk.
pub fn sample_ring() -> (RingProducer, RingConsumer) {
    let queue: &'static mut Queue<f32, RING_SLOTS> = Box::leak(Box::new(Queue::new()));
    let (tx, rx) = queue.split();
    let counters = Arc::new(Counters {
        pushed: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        overrun_events: AtomicU64::new(0),
        first_loss_at: AtomicU64::new(u64::MAX),
    });
    (
        RingProducer {
            tx,
            counters: Arc::clone(&counters),
        },
        RingConsumer { rx, counters },
    )
}

impl RingProducer {
    /// Pushes mono samples; returns how many fit. No allocation.
    pub fn push(&mut self, samples: &[f32]) -> usize {
        let mut n = 0;
        for &s in samples {
            if self.tx.enqueue(s).is_err() {
                break;
            }
            n += 1;
        }
        self.account(samples.len(), n);
        n
    }

    /// Averages each frame of `channels` interleaved samples to one mono sample and pushes
    /// it; returns how many mono samples fit. No allocation.
    pub fn push_interleaved(&mut self, data: &[f32], channels: usize) -> usize {
        if channels <= 1 {
            return self.push(data);
        }
        let scale = 1.0 / channels as f32;
        let frames = data.len() / channels;
        let mut n = 0;
        for frame in data.chunks_exact(channels) {
            if self.tx.enqueue(frame.iter().sum::<f32>() * scale).is_err() {
                break;
            }
            n += 1;
        }
        self.account(frames, n);
        n
    }

    fn account(&self, offered: usize, taken: usize) {
        let before = self
            .counters
            .pushed
            .fetch_add(taken as u64, Ordering::Relaxed);
        if taken < offered {
            let _ = self.counters.first_loss_at.compare_exchange(
                u64::MAX,
                before + taken as u64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            self.counters
                .dropped
                .fetch_add((offered - taken) as u64, Ordering::Relaxed);
            self.counters.overrun_events.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl RingConsumer {
    /// Moves up to `max` samples into `out`; returns how many.
    pub fn pop_into(&mut self, out: &mut Vec<f32>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx.dequeue() {
                Some(s) => out.push(s),
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Samples waiting.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no sample is waiting.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Samples the producer could not store because the ring was full (dropped).
    pub fn overruns(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Callbacks that lost samples to a full ring.
    pub fn overrun_events(&self) -> u64 {
        self.counters.overrun_events.load(Ordering::Relaxed)
    }

    /// How many samples had been stored when the first one was lost (`None`: no loss):
    /// everything before that point is contiguous.
    pub fn first_overrun_at(&self) -> Option<u64> {
        match self.counters.first_loss_at.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    /// Samples stored by the producer so far.
    pub fn pushed(&self) -> u64 {
        self.counters.pushed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_counts_what_it_drops() {
        let (mut tx, mut rx) = sample_ring();
        let big = vec![0.25f32; RING_SLOTS + 99];
        let taken = tx.push(&big);
        assert_eq!(taken, RING_SLOTS - 1);
        assert_eq!(rx.overruns(), 100);
        assert_eq!(rx.overrun_events(), 1);
        assert_eq!(rx.first_overrun_at(), Some((RING_SLOTS - 1) as u64));
        let mut out = Vec::new();
        assert_eq!(rx.pop_into(&mut out, 10), 10);
        assert_eq!(rx.len(), RING_SLOTS - 11);
        assert_eq!(rx.pushed(), (RING_SLOTS - 1) as u64);
    }

    #[test]
    fn samples_cross_threads_in_order() {
        let (mut tx, mut rx) = sample_ring();
        let t = std::thread::spawn(move || {
            let chunk: Vec<f32> = (0..100).map(|i| i as f32).collect();
            let mut sent = 0;
            while sent < 100 {
                sent += tx.push(&chunk[sent..]);
            }
        });
        let mut out = Vec::new();
        while out.len() < 100 {
            rx.pop_into(&mut out, usize::MAX);
            std::thread::yield_now();
        }
        t.join().unwrap();
        assert_eq!(out, (0..100).map(|i| i as f32).collect::<Vec<_>>());
    }
}
