//! Enrolment: who may join the fleet. The operator issues enrolment tokens
//! (`hush-host devices enrol`), each good for a quota of devices until it expires; a device
//! registers only by presenting one ([`crate::RoundEngine::register`]), and gets a device
//! token that expires after `enrolment.device_token_days`. Either kind can be revoked.
//! Every token is a random 256-bit string stored only as its SHA-256
//! ([`crate::engine::token_hash`]).
//!
//! The fleet's size — the population a round's expected cohort, and so its noise divisor,
//! is computed from — is the devices active when the round opens, fixed for the round:
//! registrations during a round change nothing until the next one, and each enrolment
//! token can add at most its quota.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::engine::token_hash;
use crate::store::{DeviceRow, EnrolmentRow, Store};
use crate::FlError;

/// What every enrolment token starts with (so logs and support can tell the kinds apart).
pub const ENROLMENT_PREFIX: &str = "hush-enrol-";

/// A fresh random 256-bit token, as 64 hex digits after `prefix`.
pub fn random_token(prefix: &str, rng: &mut impl Rng) -> String {
    let bytes: [u8; 32] = rng.random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// A newly issued enrolment token: shown once, stored only as a hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Issued {
    /// Its id (for `hush-host devices revoke --enrolment`).
    pub id: u64,
    /// The token to hand to devices.
    pub token: String,
    /// Devices it may register.
    pub quota: u64,
    /// When it stops registering devices (Unix ms).
    pub expires_at_ms: u64,
}

/// Issues an enrolment token for `quota` devices, valid for `valid_ms` from `now_ms`.
pub fn issue(
    store: &mut impl Store,
    label: &str,
    quota: u64,
    valid_ms: u64,
    now_ms: u64,
) -> Result<Issued, FlError> {
    if quota == 0 {
        return Err(FlError::Enrolment(
            "an enrolment token's quota must be at least 1 device".into(),
        ));
    }
    if valid_ms == 0 {
        return Err(FlError::Enrolment(
            "an enrolment token's validity must be positive".into(),
        ));
    }
    let token = random_token(ENROLMENT_PREFIX, &mut ChaCha20Rng::from_os_rng());
    let expires_at_ms = now_ms.saturating_add(valid_ms);
    let id = store.add_enrolment(&token_hash(&token), label, quota, expires_at_ms, now_ms)?;
    Ok(Issued {
        id,
        token,
        quota,
        expires_at_ms,
    })
}

/// The device holding `token` at `now_ms`, or why the token is refused (unknown, revoked,
/// expired). Needs only a store to read, so a server can answer it on its own connection,
/// outside the engine's lock.
pub fn authenticate(
    store: &impl Store,
    token: &str,
    now_ms: u64,
) -> Result<Result<u64, &'static str>, FlError> {
    let Some(device) = store.device_by_token_hash(&token_hash(token))? else {
        return Ok(Err("unknown token"));
    };
    Ok(if device.revoked_at_ms.is_some() {
        Err("the device token was revoked by the operator")
    } else if !device.active(now_ms) {
        Err("the device token has expired: register again with an enrolment token")
    } else {
        Ok(device.id)
    })
}

/// Every device and every enrolment token, for `hush-host devices list`.
pub fn list(store: &impl Store) -> Result<(Vec<DeviceRow>, Vec<EnrolmentRow>), FlError> {
    Ok((store.device_list()?, store.enrolments()?))
}

/// What to revoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoke {
    /// A device: its token stops working at once, and it leaves the population from the
    /// next round on.
    Device(u64),
    /// An enrolment token: it registers nobody more (devices it registered keep theirs).
    Enrolment(u64),
}

/// Revokes `what`; an id that does not exist or is already revoked is an error naming it.
pub fn revoke(store: &mut impl Store, what: Revoke, now_ms: u64) -> Result<(), FlError> {
    let (done, name, id) = match what {
        Revoke::Device(id) => (store.revoke_device(id, now_ms)?, "device", id),
        Revoke::Enrolment(id) => (store.revoke_enrolment(id, now_ms)?, "enrolment token", id),
    };
    if done {
        Ok(())
    } else {
        Err(FlError::Enrolment(format!(
            "there is no unrevoked {name} with id {id} (see `hush-host devices list`)"
        )))
    }
}
