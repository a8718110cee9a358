//! `hush-host devices enrol | list | revoke --config hush.toml`: the operator's side of
//! enrolment, on the host's store (while it serves, too: SQLite in WAL mode takes the
//! writes in turn, PostgreSQL locks the rows it changes). See docs/security.md.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::fl::enrolment::{self, Revoke};
use hush_host::fl::store::Store;
use hush_host::fl::{Clock, FlConfig, SystemClock};

/// `hush-host devices …`.
#[derive(clap::Subcommand)]
pub enum DevicesCommand {
    /// Issue an enrolment token for up to --quota devices; prints the token alone on
    /// stdout (it is stored only as a hash: keep it now).
    Enrol(EnrolArgs),
    /// Every device and enrolment token, with their state.
    List(ConfigArg),
    /// Revoke a device's token (it stops working at once) or an enrolment token (it
    /// registers nobody more).
    Revoke(RevokeArgs),
}

/// The host's configuration file.
#[derive(clap::Args)]
pub struct ConfigArg {
    /// The host's configuration (its `server.store`, or else `server.data_dir`, holds the
    /// store).
    #[arg(long, default_value = "hush.toml")]
    pub config: PathBuf,
}

/// Arguments of `devices enrol`.
#[derive(clap::Args)]
pub struct EnrolArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Devices this token may register.
    #[arg(long)]
    quota: u64,
    /// Days the token stays valid.
    #[arg(long, default_value_t = 7.0)]
    valid_days: f64,
    /// A name for the operator's records (e.g. the batch or site).
    #[arg(long, default_value = "")]
    label: String,
}

/// Arguments of `devices revoke`.
#[derive(clap::Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// A device id (see `devices list`).
    #[arg(
        long,
        conflicts_with = "enrolment",
        required_unless_present = "enrolment"
    )]
    device: Option<u64>,
    /// An enrolment token's id.
    #[arg(long)]
    enrolment: Option<u64>,
}

fn open_store(config: &ConfigArg) -> anyhow::Result<Box<dyn Store>> {
    let cfg = FlConfig::load(&config.config)
        .with_context(|| format!("reading {}", config.config.display()))?;
    let data = &cfg.server.data_dir;
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    Ok(hush_host::store::open(data, cfg.server.store.as_deref())?)
}

fn days_ms(days: f64) -> anyhow::Result<u64> {
    anyhow::ensure!(
        days.is_finite() && days > 0.0 && days <= 36_500.0,
        "--valid-days = {days}: expected a number of days in (0, 36500]"
    );
    Ok((days * 86_400_000.0) as u64)
}

/// Runs a `devices` subcommand.
pub fn run(cmd: DevicesCommand) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    match cmd {
        DevicesCommand::Enrol(a) => {
            let mut store = open_store(&a.config)?;
            let issued =
                enrolment::issue(&mut store, &a.label, a.quota, days_ms(a.valid_days)?, now)?;
            eprintln!(
                "enrolment token {} for up to {} devices, valid for {} days; devices join with \
                 `hush-device join --enrolment-token <token>`",
                issued.id, issued.quota, a.valid_days
            );
            println!("{}", issued.token);
        }
        DevicesCommand::List(c) => {
            let (devices, enrolments) = enrolment::list(&open_store(&c)?)?;
            println!("enrolment tokens:");
            for e in &enrolments {
                let state = match e.revoked_at_ms {
                    Some(_) => "revoked",
                    None if now >= e.expires_at_ms => "expired",
                    None => "valid",
                };
                println!(
                    "  {:>5}  {state:<8} {}/{} used  {:?}",
                    e.id, e.used, e.quota, e.label
                );
            }
            println!("devices:");
            for d in &devices {
                let state = match (d.revoked_at_ms, d.active(now)) {
                    (Some(_), _) => "revoked",
                    (None, false) => "expired",
                    (None, true) => "active",
                };
                let via = d.enrolment.map_or("-".to_string(), |e| e.to_string());
                println!(
                    "  {:>7}  {state:<8} enrolment {via:>5}  {:?}",
                    d.id, d.label
                );
            }
        }
        DevicesCommand::Revoke(a) => {
            let what = match (a.device, a.enrolment) {
                (Some(d), _) => Revoke::Device(d),
                (None, Some(e)) => Revoke::Enrolment(e),
                (None, None) => anyhow::bail!("name --device ID or --enrolment ID"),
            };
            enrolment::revoke(&mut open_store(&a.config)?, what, now)?;
            match what {
                Revoke::Device(d) => println!("device {d} revoked"),
                Revoke::Enrolment(e) => println!("enrolment token {e} revoked"),
            }
        }
    }
    Ok(())
}
