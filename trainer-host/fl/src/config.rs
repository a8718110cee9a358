//! The round server's configuration, `hush.toml`: every key optional except
//! `server.initial_model`, with the defaults documented on each field and in
//! `trainer-host/hush.example.toml`. Unknown keys and out-of-range values are errors that
//! name the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hush_models::dp::{ClipStrategy, NoiseKind};
use hush_models::optim::ServerOptimizerConfig;
use hush_privacy::accountant::federated::Participation;
use serde::{Deserialize, Serialize};

use super::FlError;
use hush_privacy::accountant::Accountant;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlConfig {
    /// `[server]`: where to listen and keep state.
    #[serde(default)]
    pub server: ServerSection,
    /// `[rounds]`: how many rounds, sampling, deadlines.
    #[serde(default)]
    pub rounds: RoundsSection,
    /// `[dp]`: clipping and central noise.
    #[serde(default)]
    pub dp: DpSection,
    /// `[local]`: the local training recipe sent to devices.
    #[serde(default)]
    pub local: LocalSection,
    /// `[optimizer]`: the server optimizer.
    #[serde(default)]
    pub optimizer: OptimizerSection,
    /// `[budget]`: the privacy budget the ledger enforces.
    #[serde(default)]
    pub budget: BudgetSection,
    /// `[limits]`: timeouts, connection and upload limits, request rates.
    #[serde(default)]
    pub limits: LimitsSection,
    /// `[enrolment]`: how long device tokens live.
    #[serde(default)]
    pub enrolment: EnrolmentSection,
    /// Seed for reproducible simulations (noise and cohort draws become predictable to
    /// anyone who knows it). Default: none, OS entropy.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Address to bind (default `127.0.0.1:8470`; port 0 picks a free port).
    pub listen: String,
    /// Directory for `hush.sqlite` (devices, rounds, reports, ledger) and model versions
    /// under `models/v{N}/` (default `hush-data`).
    pub data_dir: PathBuf,
    /// Where devices, rounds, reports and the ledger are kept instead of `hush.sqlite`: a
    /// PostgreSQL database, `postgres://user[:password]@host[:port]/database` (default:
    /// none, SQLite in `data_dir`). Hosts on one database share its rounds as replicas.
    pub store: Option<String>,
    /// Model package the first round starts from (required); copied to `models/v0/`.
    pub initial_model: PathBuf,
    /// Largest update body in bytes (default: the encoded size of a full update of the
    /// model plus room for the header).
    pub max_upload_bytes: Option<usize>,
    /// How often the deadline timer runs, in milliseconds (default 100).
    pub tick_ms: u64,
    /// Publish every model version with its NNEF archives, for devices built without
    /// tract's ONNX parser or tract-pulse: written into v0 when the initial model comes
    /// without them, and made from each later version's weights (default true). When false,
    /// versions carry the archives the initial model has, if any.
    pub nnef_archives: bool,
    /// `[server.tls]`: serve HTTPS with this certificate and key (default: plain HTTP).
    pub tls: Option<TlsSection>,
}

/// `[server.tls]`: PEM files for HTTPS (rustls). Devices trust the certificate through
/// the public roots or `hush-device join --ca-cert`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8470".into(),
            data_dir: PathBuf::from("hush-data"),
            store: None,
            initial_model: PathBuf::new(),
            max_upload_bytes: None,
            tick_ms: 100,
            nnef_archives: true,
            tls: None,
        }
    }
}

/// `[rounds]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoundsSection {
    /// Rounds to release (abandoned rounds do not count; default 10).
    pub rounds: u64,
    /// Probability `q` that a device joins a round's cohort, by its own draw (default 0.5).
    pub sampling_rate: f64,
    /// Published estimate of the fraction of active devices reachable in a round (default
    /// 1): the divisor is `q × population × availability`, a constant fixed before the round,
    /// never the realized count. The accountant still uses `q` for every device.
    pub availability: f64,
    /// A fixed-size cohort chosen among the devices available: **refused** — the accountant
    /// cannot account for it ([`hush_privacy::accountant::federated::Participation`]); the
    /// key exists so that asking for it gets that explanation. Default: none (Poisson).
    pub cohort_size: Option<u64>,
    /// Seconds from a round's opening to its deadline (default 60).
    pub deadline_secs: f64,
    /// Fewest accepted reports for a round to be released; fewer → abandoned, no ε spent
    /// (default 1).
    pub min_reports: u64,
    /// A round opens only once this many devices are registered (default 1). The round's
    /// population is the devices registered when it opens.
    pub min_devices: u64,
    /// Milliseconds a device not picked should wait before checking in again, at least
    /// (default 1000).
    pub retry_after_ms: u64,
    /// The check-ins per second the whole fleet is asked to keep under: a waiting device is
    /// told to come back after `max(retry_after_ms, devices / max_checkins_per_second)`
    /// (default 2000; 10 000 devices wait 5 s).
    pub max_checkins_per_second: f64,
}

impl Default for RoundsSection {
    fn default() -> Self {
        Self {
            rounds: 10,
            sampling_rate: 0.5,
            availability: 1.0,
            cohort_size: None,
            deadline_secs: 60.0,
            min_reports: 1,
            min_devices: 1,
            retry_after_ms: 1000,
            max_checkins_per_second: 2000.0,
        }
    }
}

/// How the noise is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseKindName {
    /// Floating-point Gaussian.
    Gaussian,
    /// Discrete Gaussian on a grid of step `dp.granularity`.
    Discrete,
}

/// `[dp]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpSection {
    /// `false` runs non-private federated averaging: no noise, no ledger, mean over the
    /// reports received (baselines only; default `true`).
    pub enabled: bool,
    /// Noise multiplier `z`: noise std on the sum is `z × sensitivity` (default 1.0).
    pub noise_multiplier: f64,
    /// Noise-cohort simulation size `M` (≥ the expected cohort): the noise is scaled as if
    /// `M` devices had contributed, and the ledger accounts the effective multiplier
    /// `z·C/M` actually used (default: none).
    pub noise_cohort_size: Option<f64>,
    /// Total L2 bound on one device's update (default 1.0).
    pub clip: f32,
    /// `flat`, `per-layer-uniform` or `per-layer-dim` (default `flat`).
    pub clipping: ClipStrategy,
    /// Devices scale every layer to exactly its bound (layer-wise normalization; default
    /// `false`).
    pub normalize_layers: bool,
    /// `gaussian` or `discrete` (default `gaussian`).
    pub noise: NoiseKindName,
    /// Grid step of the discrete mode (default 1e-5).
    pub granularity: f64,
    /// Std of the noise each device adds locally (default 0: central noise only).
    pub local_noise_std: f32,
    /// Relative slack when the host re-checks norms, for float rounding (default 1e-4).
    pub norm_tolerance: f32,
}

impl Default for DpSection {
    fn default() -> Self {
        Self {
            enabled: true,
            noise_multiplier: 1.0,
            noise_cohort_size: None,
            clip: 1.0,
            clipping: ClipStrategy::Flat,
            normalize_layers: false,
            noise: NoiseKindName::Gaussian,
            granularity: 1e-5,
            local_noise_std: 0.0,
            norm_tolerance: 1e-4,
        }
    }
}

impl DpSection {
    /// The noise kind for [`hush_models::dp::GaussianMechanism`].
    pub fn noise_kind(&self) -> NoiseKind {
        match self.noise {
            NoiseKindName::Gaussian => NoiseKind::Gaussian,
            NoiseKindName::Discrete => NoiseKind::DiscreteGaussian {
                granularity: self.granularity,
            },
        }
    }
}

/// `[local]`: what devices do in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalSection {
    /// Passes over the local data (default 1).
    pub epochs: u32,
    /// Examples per local step (default 16).
    pub batch_size: u32,
    /// Local SGD learning rate (default 0.05).
    pub lr: f32,
    /// Per-example gradient clip in local steps (default: none).
    pub example_clip: Option<f32>,
}

impl Default for LocalSection {
    fn default() -> Self {
        Self {
            epochs: 1,
            batch_size: 16,
            lr: 0.05,
            example_clip: None,
        }
    }
}

/// Which server optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// FedAvg with server lr and momentum.
    Fedavg,
    /// FedAdam.
    Fedadam,
    /// LAMB.
    Lamb,
}

/// `[optimizer]`: keys not used by `kind` are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerSection {
    /// `fedavg`, `fedadam` or `lamb` (default `fedavg`).
    pub kind: OptimizerKind,
    /// Server learning rate (default 1.0 for fedavg, 0.01 for fedadam and lamb).
    pub lr: Option<f64>,
    /// FedAvg momentum (default 0).
    pub momentum: Option<f64>,
    /// β₁ (default 0.9).
    pub beta1: Option<f64>,
    /// β₂ (default 0.99).
    pub beta2: Option<f64>,
    /// τ / ε of the adaptive methods (default 1e-3 for fedadam, 1e-6 for lamb).
    pub eps: Option<f64>,
    /// LAMB weight decay (default 0).
    pub weight_decay: Option<f64>,
}

impl Default for OptimizerSection {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Fedavg,
            lr: None,
            momentum: None,
            beta1: None,
            beta2: None,
            eps: None,
            weight_decay: None,
        }
    }
}

impl OptimizerSection {
    /// The optimizer configuration with defaults filled in; keys that do not apply to
    /// `kind` are errors.
    pub fn resolve(&self) -> Result<ServerOptimizerConfig, FlError> {
        let unused = |key: &str, set: bool| -> Result<(), FlError> {
            if set {
                Err(FlError::config(
                    &format!("optimizer.{key}"),
                    &format!("is not used by optimizer.kind = {:?}", self.kind),
                ))
            } else {
                Ok(())
            }
        };
        let cfg = match self.kind {
            OptimizerKind::Fedavg => {
                unused("beta1", self.beta1.is_some())?;
                unused("beta2", self.beta2.is_some())?;
                unused("eps", self.eps.is_some())?;
                unused("weight_decay", self.weight_decay.is_some())?;
                ServerOptimizerConfig::FedAvg {
                    lr: self.lr.unwrap_or(1.0),
                    momentum: self.momentum.unwrap_or(0.0),
                }
            }
            OptimizerKind::Fedadam => {
                unused("momentum", self.momentum.is_some())?;
                unused("weight_decay", self.weight_decay.is_some())?;
                ServerOptimizerConfig::FedAdam {
                    lr: self.lr.unwrap_or(0.01),
                    beta1: self.beta1.unwrap_or(0.9),
                    beta2: self.beta2.unwrap_or(0.99),
                    eps: self.eps.unwrap_or(1e-3),
                }
            }
            OptimizerKind::Lamb => {
                unused("momentum", self.momentum.is_some())?;
                ServerOptimizerConfig::Lamb {
                    lr: self.lr.unwrap_or(0.01),
                    beta1: self.beta1.unwrap_or(0.9),
                    beta2: self.beta2.unwrap_or(0.99),
                    eps: self.eps.unwrap_or(1e-6),
                    weight_decay: self.weight_decay.unwrap_or(0.0),
                }
            }
        };
        cfg.validate().map_err(|e| match e {
            hush_models::optim::OptimError::BadParameter {
                name,
                value,
                expected,
            } => FlError::config(
                &format!("optimizer.{name}"),
                &format!("= {value}: must be {expected}"),
            ),
            other => FlError::config("optimizer", &other.to_string()),
        })?;
        Ok(cfg)
    }
}

/// `[budget]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetSection {
    /// Total user-level ε (default 8.0); a round that would exceed it is not started.
    pub epsilon: f64,
    /// δ (default 1e-6).
    pub delta: f64,
    /// Accountant of the budget check: `rdp` or `pld` (default `rdp`); the status reports
    /// both.
    pub accountant: Accountant,
}

impl Default for BudgetSection {
    fn default() -> Self {
        Self {
            epsilon: 8.0,
            delta: 1e-6,
            accountant: Accountant::Rdp,
        }
    }
}

/// `[limits]`: what one client may hold or ask of the server. Every value has a default
/// safe on a public network; a connection closed by one of them is counted by reason in
/// `/metrics` (`hush_connections_closed_total`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Seconds a client has to send a request's headers once its first byte arrived
    /// (default 10); then the connection is closed (`header_timeout`).
    pub header_timeout_secs: f64,
    /// Seconds a keep-alive connection may sit idle between requests (default 30; closed as
    /// `idle_timeout`).
    pub idle_timeout_secs: f64,
    /// Seconds allowed for reading a request body, on top of its size at
    /// `body_min_bytes_per_sec` (default 10); a slower body is answered 408 and the
    /// connection closed (`body_timeout`).
    pub body_timeout_secs: f64,
    /// The slowest body upload allowed, in bytes per second (default 1024).
    pub body_min_bytes_per_sec: f64,
    /// Seconds from a request's headers to its answer (default 120; closed as
    /// `request_timeout`).
    pub request_timeout_secs: f64,
    /// Seconds for a TLS handshake (default 10; closed as `tls_handshake_timeout`).
    pub tls_handshake_timeout_secs: f64,
    /// Most open connections (default: the process's open-file limit, raised to its hard
    /// limit at start, less 128 kept for the database and model files). At the limit, a new
    /// connection makes the server close its oldest idle one (`evicted`); if none is idle,
    /// the new one is closed (`connection_limit`).
    pub max_connections: Option<usize>,
    /// Most uploads read and checked at once (default 64); more are answered 503 with
    /// `Retry-After`, which devices honour.
    pub max_concurrent_uploads: usize,
    /// Registrations one address may make per minute (default 30; burst the same).
    pub register_per_address_per_minute: f64,
    /// Check-ins one address may make per second (default 50; burst 2 s worth). Devices
    /// behind one NAT share it.
    pub checkin_per_address_per_second: f64,
    /// Check-ins one device may make per second (default 2; burst 2 s worth; never below
    /// twice the pace `rounds.retry_after_ms` asks waiting devices for).
    pub checkin_per_device_per_second: f64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            header_timeout_secs: 10.0,
            idle_timeout_secs: 30.0,
            body_timeout_secs: 10.0,
            body_min_bytes_per_sec: 1024.0,
            request_timeout_secs: 120.0,
            tls_handshake_timeout_secs: 10.0,
            max_connections: None,
            max_concurrent_uploads: 64,
            register_per_address_per_minute: 30.0,
            checkin_per_address_per_second: 50.0,
            checkin_per_device_per_second: 2.0,
        }
    }
}

/// `[enrolment]`: devices register only with an enrolment token the operator issued
/// (`hush-host devices enrol`); the device token they get back expires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnrolmentSection {
    /// Days a device token stays valid after registration (default 365); an expired device
    /// enrols again.
    pub device_token_days: f64,
}

impl Default for EnrolmentSection {
    fn default() -> Self {
        Self {
            device_token_days: 365.0,
        }
    }
}

impl FlConfig {
    /// A configuration with every default and `initial_model` set.
    pub fn with_model(initial_model: &Path, data_dir: &Path) -> Self {
        Self {
            server: ServerSection {
                initial_model: initial_model.to_path_buf(),
                data_dir: data_dir.to_path_buf(),
                ..ServerSection::default()
            },
            rounds: RoundsSection::default(),
            dp: DpSection::default(),
            local: LocalSection::default(),
            optimizer: OptimizerSection::default(),
            budget: BudgetSection::default(),
            limits: LimitsSection::default(),
            enrolment: EnrolmentSection::default(),
            seed: None,
        }
    }

    /// Parses TOML text and validates it.
    pub fn from_toml(text: &str) -> Result<Self, FlError> {
        let cfg: FlConfig = toml::from_str(text).map_err(|e| FlError::Config {
            key: "hush.toml".into(),
            reason: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and validates `path`; relative paths inside are taken relative to the file's
    /// directory.
    pub fn load(path: &Path) -> Result<Self, FlError> {
        let text = std::fs::read_to_string(path).map_err(|e| FlError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        let mut cfg = Self::from_toml(&text).map_err(|e| match e {
            FlError::Config { key, reason } if key == "hush.toml" => FlError::Config {
                key: path.display().to_string(),
                reason,
            },
            other => other,
        })?;
        if let Some(base) = path.parent() {
            let tls = cfg
                .server
                .tls
                .iter_mut()
                .flat_map(|t| [&mut t.cert, &mut t.key]);
            for p in [&mut cfg.server.data_dir, &mut cfg.server.initial_model]
                .into_iter()
                .chain(tls)
            {
                if p.is_relative() && !p.as_os_str().is_empty() {
                    *p = base.join(&*p);
                }
            }
        }
        Ok(cfg)
    }

    /// The listen address.
    pub fn listen_addr(&self) -> Result<SocketAddr, FlError> {
        self.server.listen.parse().map_err(|e| {
            FlError::config(
                "server.listen",
                &format!(
                    "{:?} is not an address like 127.0.0.1:8470 ({e})",
                    self.server.listen
                ),
            )
        })
    }

    /// Checks every value's range; errors name the key.
    pub fn validate(&self) -> Result<(), FlError> {
        let need = |ok: bool, key: &str, reason: String| {
            if ok {
                Ok(())
            } else {
                Err(FlError::config(key, &reason))
            }
        };
        self.listen_addr()?;
        need(
            !self.server.initial_model.as_os_str().is_empty(),
            "server.initial_model",
            "is required: the model package the first round starts from".into(),
        )?;
        need(
            !self.server.data_dir.as_os_str().is_empty(),
            "server.data_dir",
            "must not be empty".into(),
        )?;
        if let Some(url) = &self.server.store {
            need(
                url.starts_with("postgres://") || url.starts_with("postgresql://"),
                "server.store",
                format!(
                    "= {:?}: expected a postgres://user@host:port/database URL (or no \
                     server.store: SQLite in server.data_dir)",
                    url.split('@').next_back().unwrap_or_default()
                ),
            )?;
        }
        need(
            self.server.tick_ms > 0,
            "server.tick_ms",
            "must be > 0".into(),
        )?;
        if let Some(b) = self.server.max_upload_bytes {
            need(b > 0, "server.max_upload_bytes", "must be > 0".into())?;
        }
        let r = &self.rounds;
        need(r.rounds > 0, "rounds.rounds", "must be > 0".into())?;
        need(
            r.sampling_rate > 0.0 && r.sampling_rate <= 1.0,
            "rounds.sampling_rate",
            format!("= {}: must be in (0, 1]", r.sampling_rate),
        )?;
        need(
            r.availability > 0.0 && r.availability <= 1.0,
            "rounds.availability",
            format!("= {}: must be in (0, 1]", r.availability),
        )?;
        if let Some(cohort_size) = r.cohort_size {
            Participation::FixedSizeAmongAvailable { cohort_size }
                .accounted_rate()
                .map_err(|e| FlError::config("rounds.cohort_size", &e.to_string()))?;
        }
        need(
            r.deadline_secs.is_finite() && r.deadline_secs > 0.0 && r.deadline_secs < 1e7,
            "rounds.deadline_secs",
            format!("= {}: must be > 0 (and below 10^7)", r.deadline_secs),
        )?;
        need(
            r.min_reports > 0,
            "rounds.min_reports",
            "must be ≥ 1".into(),
        )?;
        need(
            r.min_devices > 0,
            "rounds.min_devices",
            "must be ≥ 1".into(),
        )?;
        let d = &self.dp;
        need(
            d.noise_multiplier.is_finite() && d.noise_multiplier >= 0.0,
            "dp.noise_multiplier",
            format!("= {}: must be finite and ≥ 0", d.noise_multiplier),
        )?;
        need(
            !d.enabled || d.noise_multiplier > 0.0,
            "dp.noise_multiplier",
            "must be > 0 when dp.enabled (set dp.enabled = false for a non-private baseline)"
                .into(),
        )?;
        if let Some(m) = d.noise_cohort_size {
            need(
                m.is_finite() && m > 0.0,
                "dp.noise_cohort_size",
                format!("= {m}: must be > 0"),
            )?;
        }
        need(
            d.clip.is_finite() && d.clip > 0.0,
            "dp.clip",
            format!("= {}: must be finite and > 0", d.clip),
        )?;
        need(
            d.granularity.is_finite() && d.granularity > 0.0,
            "dp.granularity",
            format!("= {}: must be > 0", d.granularity),
        )?;
        need(
            d.local_noise_std.is_finite() && d.local_noise_std >= 0.0,
            "dp.local_noise_std",
            format!("= {}: must be ≥ 0", d.local_noise_std),
        )?;
        need(
            d.norm_tolerance.is_finite() && (0.0..0.1).contains(&d.norm_tolerance),
            "dp.norm_tolerance",
            format!("= {}: must be in [0, 0.1)", d.norm_tolerance),
        )?;
        let l = &self.local;
        need(l.epochs > 0, "local.epochs", "must be ≥ 1".into())?;
        need(l.batch_size > 0, "local.batch_size", "must be ≥ 1".into())?;
        need(
            l.lr.is_finite() && l.lr > 0.0,
            "local.lr",
            format!("= {}: must be > 0", l.lr),
        )?;
        if let Some(c) = l.example_clip {
            need(
                c.is_finite() && c > 0.0,
                "local.example_clip",
                format!("= {c}: must be > 0"),
            )?;
        }
        self.optimizer.resolve()?;
        let l = &self.limits;
        for (key, v) in [
            ("limits.header_timeout_secs", l.header_timeout_secs),
            ("limits.idle_timeout_secs", l.idle_timeout_secs),
            ("limits.body_timeout_secs", l.body_timeout_secs),
            ("limits.body_min_bytes_per_sec", l.body_min_bytes_per_sec),
            ("limits.request_timeout_secs", l.request_timeout_secs),
            (
                "limits.tls_handshake_timeout_secs",
                l.tls_handshake_timeout_secs,
            ),
            (
                "limits.register_per_address_per_minute",
                l.register_per_address_per_minute,
            ),
            (
                "limits.checkin_per_address_per_second",
                l.checkin_per_address_per_second,
            ),
            (
                "limits.checkin_per_device_per_second",
                l.checkin_per_device_per_second,
            ),
            (
                "enrolment.device_token_days",
                self.enrolment.device_token_days,
            ),
            (
                "rounds.max_checkins_per_second",
                self.rounds.max_checkins_per_second,
            ),
        ] {
            need(
                v.is_finite() && v > 0.0 && v <= 1e9,
                key,
                format!("= {v}: must be a positive number"),
            )?;
        }
        need(
            l.max_connections.is_none_or(|n| n >= 2),
            "limits.max_connections",
            "must be at least 2".into(),
        )?;
        need(
            l.max_concurrent_uploads > 0,
            "limits.max_concurrent_uploads",
            "must be > 0".into(),
        )?;
        let b = &self.budget;
        need(
            b.epsilon.is_finite() && b.epsilon > 0.0,
            "budget.epsilon",
            format!("= {}: must be > 0", b.epsilon),
        )?;
        need(
            b.delta > 0.0 && b.delta < 1.0,
            "budget.delta",
            format!("= {}: must be in (0, 1)", b.delta),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_keys() {
        let cfg = FlConfig::from_toml("[server]\ninitial_model = \"m\"\n").unwrap();
        assert_eq!(cfg.rounds.rounds, 10);
        assert_eq!(cfg.dp.clipping, ClipStrategy::Flat);
        assert_eq!(
            cfg.optimizer.resolve().unwrap(),
            ServerOptimizerConfig::FedAvg {
                lr: 1.0,
                momentum: 0.0
            }
        );
    }

    #[test]
    fn errors_name_the_key() {
        let err = |t: &str| FlConfig::from_toml(t).unwrap_err().to_string();
        let e = err("[server]\ninitial_model = \"m\"\n[dp]\nnoize = 1\n");
        assert!(e.contains("noize"), "{e}");
        let e = err("[server]\ninitial_model = \"m\"\n[rounds]\nsampling_rate = 1.5\n");
        assert!(e.contains("rounds.sampling_rate"), "{e}");
        let e = err("[server]\ninitial_model = \"m\"\n[rounds]\navailability = 0.0\n");
        assert!(e.contains("rounds.availability"), "{e}");
        // A fixed-size cohort among the available devices is refused, with the reason.
        let e = err("[server]\ninitial_model = \"m\"\n[rounds]\ncohort_size = 500\n");
        assert!(
            e.contains("rounds.cohort_size") && e.contains("not Poisson sampling"),
            "{e}"
        );
        let e = err("[server]\ninitial_model = \"m\"\n[dp]\nclipping = \"round\"\n");
        assert!(e.contains("clipping"), "{e}");
        let e = err(
            "[server]\ninitial_model = \"m\"\n[optimizer]\nkind = \"fedadam\"\nmomentum = 0.9\n",
        );
        assert!(e.contains("optimizer.momentum"), "{e}");
        let e = err("[server]\ninitial_model = \"m\"\n[optimizer]\nkind = \"lamb\"\nbeta2 = 1.0\n");
        assert!(e.contains("optimizer.beta2"), "{e}");
        let e = err("[server]\nlisten = \"nowhere\"\ninitial_model = \"m\"\n");
        assert!(e.contains("server.listen"), "{e}");
        let e = err("[rounds]\nrounds = 3\n");
        assert!(e.contains("server.initial_model"), "{e}");
        // A store that is not PostgreSQL's URL is named, without echoing its password.
        let e = err("[server]\ninitial_model = \"m\"\nstore = \"mysql://u:secret@db/h\"\n");
        assert!(
            e.contains("server.store") && e.contains("postgres://"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        let ok = "[server]\ninitial_model = \"m\"\nstore = \"postgres://u@db:5432/h\"\n";
        assert_eq!(
            FlConfig::from_toml(ok).unwrap().server.store.as_deref(),
            Some("postgres://u@db:5432/h")
        );
    }

    #[test]
    fn example_config_parses() {
        let text = include_str!("../../hush.example.toml");
        let cfg = FlConfig::from_toml(text).unwrap();
        assert!(cfg.dp.enabled);
        // The values the example writes out are the defaults.
        assert_eq!(cfg.limits, LimitsSection::default());
        assert_eq!(cfg.enrolment, EnrolmentSection::default());
        assert_eq!(
            cfg.server.tls, None,
            "plain HTTP unless [server.tls] is given"
        );
    }

    #[test]
    fn tls_paths_are_relative_to_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hush.toml");
        std::fs::write(
            &file,
            "[server]\ninitial_model = \"m\"\n[server.tls]\ncert = \"c.pem\"\nkey = \"/abs/k.pem\"\n",
        )
        .unwrap();
        let tls = FlConfig::load(&file).unwrap().server.tls.unwrap();
        assert_eq!(tls.cert, dir.path().join("c.pem"));
        assert_eq!(tls.key, PathBuf::from("/abs/k.pem"));
        let e =
            FlConfig::from_toml("[server]\ninitial_model = \"m\"\n[server.tls]\ncert = \"c\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("key"), "{e}");
    }
}
