//! Request rates per key (an address, a device): token buckets, refused with 429 and a
//! `Retry-After` the client honours. Memory is bounded: past [`MAX_KEYS`] keys, the
//! buckets that have refilled (keys not heard from lately) are dropped, and if every
//! bucket is in use the limiter refuses new keys rather than grow.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most keys one limiter tracks.
pub const MAX_KEYS: usize = 1 << 20;

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A token bucket per key: `rate` requests per second on average, `burst` at once.
pub struct RateLimiter<K> {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<K, Bucket>>,
    max_keys: usize,
}

impl<K: Eq + Hash + Clone> RateLimiter<K> {
    /// `rate` per second, bursts of `burst` (both > 0).
    pub fn new(rate: f64, burst: f64) -> Self {
        Self::with_max_keys(rate, burst, MAX_KEYS)
    }

    fn with_max_keys(rate: f64, burst: f64, max_keys: usize) -> Self {
        Self {
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
            max_keys,
        }
    }

    /// Takes one token for `key` at `now`: `Ok` or how long until one is available.
    pub fn check_at(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst
            });
            if buckets.len() >= self.max_keys {
                return Err(Duration::from_secs_f64(1.0 / rate));
            }
        }
        let b = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refilled = now.saturating_duration_since(b.at).as_secs_f64() * self.rate;
        b.tokens = (b.tokens + refilled).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.rate))
        }
    }

    /// [`RateLimiter::check_at`] now.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds_per_key() {
        let l = RateLimiter::new(2.0, 3.0);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.check_at(&"a", t0).is_ok());
        }
        let wait = l.check_at(&"a", t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        // Another key has its own bucket.
        assert!(l.check_at(&"b", t0).is_ok());
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert!(l.check_at(&"a", t1).is_ok());
        assert!(l.check_at(&"a", t1).is_err());
    }

    #[test]
    fn memory_is_bounded_and_quiet_keys_make_room() {
        let l = RateLimiter::with_max_keys(1.0, 1.0, 2);
        let t0 = Instant::now();
        assert!(l.check_at(&1, t0).is_ok());
        assert!(l.check_at(&2, t0).is_ok());
        // Both buckets are empty: a third key is refused rather than tracked.
        assert!(l.check_at(&3, t0).is_err());
        // Once they have refilled, they are dropped for the newcomer.
        let t1 = t0 + Duration::from_secs(2);
        assert!(l.check_at(&3, t1).is_ok());
        assert!(l.buckets.lock().unwrap().len() <= 2);
    }
}
