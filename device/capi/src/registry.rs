//! Open handles. A handle the caller holds (`HushSpotter *`, `HushTranscriber *`) is a
//! token: a number, unique over the process's life and never an address, looked up in a
//! table per kind. So a handle is never dereferenced: one closed already, one of the
//! other kind, or any other pointer is refused with `HUSH_STATUS_INVALID_HANDLE`, and a
//! stale handle can never reach a newer object that happens to sit at the same address.
//!
//! Each object sits behind its own mutex: calls on one handle from several threads run
//! one at a time; calls on different handles run in parallel. A panic inside a call
//! poisons that mutex, and the handle answers `HUSH_STATUS_INTERNAL_PANIC` until closed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::status::{fail, ApiError, HushStatus};

/// The next token; shared by every kind, so that no two live handles of any kind share
/// one. 0 is never handed out (it would be NULL).
static NEXT: AtomicUsize = AtomicUsize::new(1);

/// The token a handle carries (NULL refused).
pub(crate) fn token_of<H>(handle: *const H, name: &str) -> Result<usize, ApiError> {
    match handle.addr() {
        0 => fail(HushStatus::NullPointer, format!("`{name}` is NULL")),
        token => Ok(token),
    }
}

/// The handle that carries `token`: never dereferenced, by this library or the caller.
pub(crate) fn handle_of<H>(token: usize) -> *mut H {
    std::ptr::without_provenance_mut(token)
}

/// The open objects of one kind, by token.
pub(crate) struct Registry<T> {
    kind: &'static str,
    open: Mutex<BTreeMap<usize, Arc<Mutex<T>>>>,
}

impl<T> Registry<T> {
    /// An empty table for handles of `kind` (named in errors).
    pub const fn new(kind: &'static str) -> Self {
        Self {
            kind,
            open: Mutex::new(BTreeMap::new()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<Mutex<T>>>> {
        // The table's own lock is held only for one map operation, which cannot leave it
        // half-changed: a poisoned lock's table is still sound.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `value` and returns its token.
    pub fn insert(&self, value: T) -> Result<usize, ApiError> {
        let token = NEXT.fetch_add(1, Ordering::Relaxed);
        if token == 0 || token > isize::MAX as usize {
            // After 2^31 opens on a 32-bit device; refuse rather than reuse a token.
            return fail(
                HushStatus::InternalPanic,
                "no handle tokens left in this process",
            );
        }
        self.table().insert(token, Arc::new(Mutex::new(value)));
        Ok(token)
    }

    /// Runs `f` on the object of `token`, holding its lock.
    pub fn with<R>(
        &self,
        token: usize,
        f: impl FnOnce(&mut T) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let object = self.table().get(&token).cloned();
        let Some(object) = object else {
            return fail(HushStatus::InvalidHandle, self.not_open(token));
        };
        let mut guard = match object.lock() {
            Ok(g) => g,
            Err(_) => {
                return fail(
                    HushStatus::InternalPanic,
                    format!(
                        "this {} is unusable: an earlier call on it panicked (a bug in \
                         hush); close it",
                        self.kind
                    ),
                )
            }
        };
        f(&mut guard)
    }

    /// Forgets the object of `token`; it is dropped once no call is using it.
    pub fn remove(&self, token: usize) -> Result<(), ApiError> {
        match self.table().remove(&token) {
            Some(_) => Ok(()),
            None => fail(HushStatus::InvalidHandle, self.not_open(token)),
        }
    }

    fn not_open(&self, token: usize) -> String {
        format!(
            "{token:#x} is not an open {}: closed already, never opened, or a handle of \
             another kind",
            self.kind
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::call;

    #[test]
    fn tokens_are_unique_closed_ones_are_refused_and_a_panic_poisons_only_its_handle() {
        static TABLE: Registry<u32> = Registry::new("counter");
        let a = TABLE.insert(1).unwrap();
        let b = TABLE.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(TABLE.with(a, |v| Ok(*v)).unwrap(), 1);

        let status = call(|| TABLE.with(a, |_| panic!("inside")));
        assert_eq!(status, HushStatus::InternalPanic);
        let e = TABLE.with(a, |v| Ok(*v)).unwrap_err();
        assert_eq!(e.status, HushStatus::InternalPanic);
        assert!(e.message.contains("close it"), "{}", e.message);
        assert_eq!(TABLE.with(b, |v| Ok(*v)).unwrap(), 2);

        TABLE.remove(a).unwrap();
        assert_eq!(
            TABLE.remove(a).unwrap_err().status,
            HushStatus::InvalidHandle
        );
        let e = TABLE.with(a, |v| Ok(*v)).unwrap_err();
        assert_eq!(e.status, HushStatus::InvalidHandle);
        assert!(e.message.contains("not an open counter"), "{}", e.message);
    }
}
