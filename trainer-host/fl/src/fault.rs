//! Named fault points: places where a test can make the process die as `kill -9` would,
//! to check that what it leaves behind is consistent after a restart.
//!
//! [`point`] compiles to nothing unless the crate is built with the cargo feature
//! `fault-points` (never part of a default or release build; `hush-host`'s tests turn it
//! on, and a test checks that `cargo build -p hush-host` resolves without it). With the
//! feature, the environment variable `HUSH_FAULT_POINT=<name>` makes the process abort at
//! the point of that name, with no destructor, flush or shutdown code running;
//! `HUSH_FAULT_POINT=<name>:pause=<ms>` makes it stop there for that long instead and go
//! on (so a test can signal the process while it is exactly there).
//!
//! The points of a release, in order ([`crate::engine`]): [`RELEASE_STAGING`] (some
//! model files written, not synced), [`RELEASE_BEFORE_COMMIT`] (files synced, nothing
//! committed), [`RELEASE_AFTER_COMMIT`] (ledger, round and version committed, files not
//! yet visible), [`RELEASE_DONE`] (everything in place).

/// Model files partly written into the staging directory, not yet synced.
pub const RELEASE_STAGING: &str = "release.staging";
/// Model files staged and synced; the transaction not yet committed.
pub const RELEASE_BEFORE_COMMIT: &str = "release.before_commit";
/// The release committed (ledger record, round, model version); its files still staged.
pub const RELEASE_AFTER_COMMIT: &str = "release.after_commit";
/// The release committed and its files visible.
pub const RELEASE_DONE: &str = "release.done";

/// Every named point, in release order.
pub const RELEASE_POINTS: [&str; 4] = [
    RELEASE_STAGING,
    RELEASE_BEFORE_COMMIT,
    RELEASE_AFTER_COMMIT,
    RELEASE_DONE,
];

/// The environment variable naming the point to die at.
pub const FAULT_POINT_ENV: &str = "HUSH_FAULT_POINT";

/// Whether this build has fault points.
pub fn enabled() -> bool {
    cfg!(feature = "fault-points")
}

/// Aborts the process if `HUSH_FAULT_POINT` names `name`, or pauses it there if it says
/// `<name>:pause=<ms>` (only with the `fault-points` feature; otherwise nothing).
#[inline]
pub fn point(name: &str) {
    #[cfg(feature = "fault-points")]
    if let Ok(v) = std::env::var(FAULT_POINT_ENV) {
        let (point, action) = v.split_once(':').unwrap_or((&v, ""));
        if point == name {
            match action.strip_prefix("pause=").map(str::parse::<u64>) {
                Some(Ok(ms)) => {
                    eprintln!("hush: fault point {name} reached; pausing {ms} ms");
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    eprintln!("hush: fault point {name}: going on");
                }
                _ => {
                    eprintln!(
                        "hush: fault point {name} reached; aborting as {FAULT_POINT_ENV} asks"
                    );
                    std::process::abort();
                }
            }
        }
    }
    #[cfg(not(feature = "fault-points"))]
    let _ = name;
}
