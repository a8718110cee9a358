//! The server's counters and their Prometheus text form (`GET /metrics`, behind the
//! operator token): connections open, accepted and closed by reason; responses refused by
//! error code; accepted uploads; check-in and upload latency histograms; and, read from the
//! engine at scrape time, rounds by state, the model version, devices and ε spent.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hush_device::protocol::StatusReport;
use hush_fl::RoundLog;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A latency histogram (cumulative on output, as Prometheus wants it).
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    over: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        match BUCKETS.iter().position(|b| s <= *b) {
            Some(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            None => self.over.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in BUCKETS.iter().zip(&self.counts) {
            cumulative += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.over.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Everything the server counts.
#[derive(Default)]
pub struct Metrics {
    open: AtomicI64,
    accepted_connections: AtomicU64,
    closed: Mutex<BTreeMap<&'static str, u64>>,
    refused: Mutex<BTreeMap<String, u64>>,
    uploads_accepted: AtomicU64,
    /// `POST /v1/checkin` latency, as the server sees it.
    pub checkin: Histogram,
    /// `POST /v1/rounds/{round}/update` latency (accepted or refused).
    pub upload: Histogram,
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    *map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

impl Metrics {
    /// A connection was accepted.
    pub fn connection_opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.accepted_connections.fetch_add(1, Ordering::Relaxed);
    }

    /// An accepted connection ended; `why` when the server closed it.
    pub fn connection_done(&self, why: Option<&'static str>) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(r) = why {
            self.connection_closed(r);
        }
    }

    /// The server closed (or refused) a connection for `reason`.
    pub fn connection_closed(&self, reason: &'static str) {
        bump(&self.closed, reason);
    }

    /// Connections the server closed for `reason` so far.
    pub fn closed(&self, reason: &str) -> u64 {
        self.closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(reason)
            .copied()
            .unwrap_or(0)
    }

    /// A request was answered with the JSON error `code`.
    pub fn refused(&self, code: &str) {
        bump(&self.refused, code.to_string());
    }

    /// An upload was accepted into a round.
    pub fn upload_accepted(&self) {
        self.uploads_accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with the engine's `status` and `rounds`.
    pub fn render(&self, status: &StatusReport, rounds: &[RoundLog]) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, lines: &[(String, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        gauge(
            "hush_connections_open",
            "Open client connections.",
            "gauge",
            &[(String::new(), self.open.load(Ordering::Relaxed) as f64)],
        );
        gauge(
            "hush_connections_accepted_total",
            "Client connections accepted.",
            "counter",
            &[(
                String::new(),
                self.accepted_connections.load(Ordering::Relaxed) as f64,
            )],
        );
        let closed: Vec<_> = self
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(r, n)| (format!("{{reason=\"{r}\"}}"), *n as f64))
            .collect();
        gauge(
            "hush_connections_closed_total",
            "Connections the server closed or refused, by reason.",
            "counter",
            &closed,
        );
        let refused: Vec<_> = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(c, n)| (format!("{{code=\"{c}\"}}"), *n as f64))
            .collect();
        gauge(
            "hush_requests_refused_total",
            "Requests answered with a JSON error, by its code.",
            "counter",
            &refused,
        );
        gauge(
            "hush_uploads_accepted_total",
            "Updates accepted into a round's sum.",
            "counter",
            &[(
                String::new(),
                self.uploads_accepted.load(Ordering::Relaxed) as f64,
            )],
        );
        let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
        for r in rounds {
            *by_state.entry(r.state.as_str()).or_default() += 1;
        }
        let states: Vec<_> = by_state
            .iter()
            .map(|(s, n)| (format!("{{state=\"{s}\"}}"), *n as f64))
            .collect();
        gauge(
            "hush_rounds",
            "Rounds by state (open, released, abandoned).",
            "gauge",
            &states,
        );
        gauge(
            "hush_model_version",
            "Latest published model version.",
            "gauge",
            &[(String::new(), status.model_version as f64)],
        );
        gauge(
            "hush_devices",
            "Devices holding a valid (unrevoked, unexpired) token.",
            "gauge",
            &[(String::new(), status.devices as f64)],
        );
        let eps: Vec<_> = [("rdp", status.epsilon_rdp), ("pld", status.epsilon_pld)]
            .into_iter()
            .filter_map(|(a, e)| e.map(|e| (format!("{{accountant=\"{a}\"}}"), e)))
            .collect();
        gauge(
            "hush_epsilon_spent",
            "User-level epsilon spent so far, by accountant (at hush_delta).",
            "gauge",
            &eps,
        );
        gauge(
            "hush_delta",
            "The delta epsilon is stated for.",
            "gauge",
            &[(String::new(), status.delta)],
        );
        self.checkin.write(
            &mut out,
            "hush_checkin_seconds",
            "Check-in latency as the server measures it.",
        );
        self.upload.write(
            &mut out,
            "hush_upload_seconds",
            "Upload latency (body read, checks, add) as the server measures it.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_count_everything() {
        let h = Histogram::default();
        for ms in [0, 3, 3, 40, 20_000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.write(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.05\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"10\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("x_count 5\n"), "{out}");
        assert!(out.contains("x_sum 20.046\n"), "{out}");
    }
}
