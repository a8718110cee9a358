//! `hush-device devices`: list audio input devices (needs the `mic` feature).

/// Arguments of `hush-device devices`.
#[derive(Debug, clap::Args)]
pub struct DevicesArgs {}

/// Prints one line per input device.
#[cfg(feature = "mic")]
pub fn run(_args: DevicesArgs) -> anyhow::Result<()> {
    let devices = hush_device::audio::capture::list_input_devices()?;
    if devices.is_empty() {
        println!("no input devices");
    }
    for d in devices {
        let rate = d.sample_rate.map_or("?".into(), |r| r.to_string());
        let ch = d.channels.map_or("?".into(), |c| c.to_string());
        println!(
            "{}{}  ({rate} Hz, {ch} ch, {})",
            if d.is_default { "* " } else { "  " },
            d.name,
            d.sample_format.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// Without `mic`, a named error.
#[cfg(not(feature = "mic"))]
pub fn run(_args: DevicesArgs) -> anyhow::Result<()> {
    anyhow::bail!("hush-device was built without the `mic` feature: no audio devices to list")
}
