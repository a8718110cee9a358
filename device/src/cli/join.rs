//! `hush-device join --server URL --data DIR [--state DIR] [--ca-cert PEM]`: take part in federated
//! training until the host says it is done (or Ctrl-C).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hush_device::client::{join, JoinConfig, JoinEvent};

/// Arguments of `hush-device join`.
#[derive(clap::Args)]
pub struct JoinArgs {
    /// Host URL, e.g. http://192.168.1.10:7878; for a host run as several replicas, their
    /// URLs separated by commas (a replica that cannot be reached is skipped).
    #[arg(long)]
    pub server: String,
    /// This device's labelled recordings (Speech Commands layout: <word>/<speaker>_nohash_<k>.wav).
    #[arg(long)]
    pub data: PathBuf,
    /// Use only this speaker's clips from --data.
    #[arg(long)]
    pub speaker: Option<String>,
    /// State directory: identity, token and downloaded models.
    #[arg(long, default_value = "hush-device-state")]
    pub state: PathBuf,
    /// Label shown to the host's operators.
    #[arg(long, default_value = "hush-device")]
    pub label: String,
    /// Timeout of each HTTP call, in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_s: u64,
    /// For an https:// host with a self-signed or private-CA certificate: trust only the
    /// CA certificates in this PEM file (default: Mozilla's root certificates).
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,
    /// The enrolment token the host's operator issued (`hush-host devices enrol`), needed
    /// the first time this device registers; a file holding it works too
    /// (`--enrolment-token @token.txt`), so it stays out of shell history.
    #[arg(long, default_value = "")]
    pub enrolment_token: String,
}

/// Runs the device loop, printing one line per event.
pub fn run(args: JoinArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;
    let mut cfg = JoinConfig::new(&args.server, args.data, args.state);
    cfg.speaker = args.speaker;
    cfg.label = args.label;
    cfg.timeout = Duration::from_secs(args.timeout_s.max(1));
    cfg.ca_cert = args.ca_cert;
    cfg.enrolment_token = match args.enrolment_token.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("--enrolment-token @{path}: cannot read the file"))?
            .trim()
            .to_string(),
        None => args.enrolment_token,
    };
    let summary = join(&cfg, &stop, &mut |e| match e {
        JoinEvent::Joined { device_id, new } => {
            let how = if new { "registered as" } else { "resuming as" };
            eprintln!("{how} device {device_id}");
        }
        JoinEvent::Trained { round, report } => eprintln!(
            "round {round}: {} local steps on {} clips, mean loss {:.3}",
            report.steps, report.examples, report.mean_loss
        ),
        JoinEvent::Uploaded { round, duplicate } => eprintln!(
            "round {round}: update {}",
            if duplicate {
                "already counted"
            } else {
                "accepted"
            }
        ),
        JoinEvent::Refused { round, error } => eprintln!("round {round}: {error}"),
        JoinEvent::Retrying { error, wait } => {
            eprintln!("{error}; retrying in {:.1} s", wait.as_secs_f64())
        }
    })
    .with_context(|| format!("joining {}", cfg.server))?;
    match summary.done {
        Some(reason) => {
            eprintln!(
                "done ({reason}): {} rounds trained, {} updates accepted, {} refused",
                summary.rounds_trained, summary.uploads_accepted, summary.uploads_refused
            );
            if let Some((version, dir)) = &summary.model {
                eprintln!(
                    "the federated model, v{version}, is in {0}: hush-device listen --model {0} \
                     --mic (or --input FILE.wav)",
                    dir.display()
                );
            }
        }
        None => eprintln!(
            "stopped: {} rounds trained, {} updates accepted",
            summary.rounds_trained, summary.uploads_accepted
        ),
    }
    Ok(())
}
