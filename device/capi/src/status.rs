//! Status codes, the thread's last error message, and [`call`], which runs an entry
//! point's body so that neither an error nor a panic leaves it other than as a status.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{HUSH_API_VERSION_MAJOR, HUSH_API_VERSION_MINOR};

/// What a call did: `HUSH_STATUS_OK` (0), or why it failed; then
/// `hush_last_error_message()` says what was wrong. The numbers are part of the API: they
/// never change within a major version, and new codes are only appended (treat an unknown
/// code as a failure).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HushStatus {
    /// Success.
    Ok = 0,
    /// A pointer argument that must not be NULL was NULL (or misaligned).
    NullPointer = 1,
    /// An argument is out of its range: an empty buffer where samples are needed, a sample
    /// that is not finite, an option out of range, a string that is not UTF-8, a training
    /// task that does not parse or fit the model.
    InvalidArgument = 2,
    /// A length is over the API's documented maximum (`HUSH_MAX_*`).
    TooLong = 3,
    /// Audio at another rate than the model's (see `hush_*_sample_rate`; resample first).
    UnsupportedSampleRate = 4,
    /// The model package directory does not exist.
    NotFound = 5,
    /// The model package is malformed, corrupt or inconsistent (model.json, model.onnx or
    /// weights.safetensors).
    BadPackage = 6,
    /// The package is a model of the other kind (a recogniser opened as a spotter, or the
    /// reverse).
    WrongModelKind = 7,
    /// An output buffer is too small; the length output holds the size needed.
    BufferTooSmall = 8,
    /// The handle is not open: closed already, never opened, or of another kind.
    InvalidHandle = 9,
    /// Running the model failed.
    InferenceFailed = 10,
    /// Local training failed.
    TrainingFailed = 11,
    /// A bug in hush: a panic was caught at the boundary. A handle it happened in is
    /// unusable from then on; close it.
    InternalPanic = 12,
}

/// Every status, in code order (private: not part of the header).
const STATUSES: [HushStatus; 13] = [
    HushStatus::Ok,
    HushStatus::NullPointer,
    HushStatus::InvalidArgument,
    HushStatus::TooLong,
    HushStatus::UnsupportedSampleRate,
    HushStatus::NotFound,
    HushStatus::BadPackage,
    HushStatus::WrongModelKind,
    HushStatus::BufferTooSmall,
    HushStatus::InvalidHandle,
    HushStatus::InferenceFailed,
    HushStatus::TrainingFailed,
    HushStatus::InternalPanic,
];

impl HushStatus {
    /// The constant's name in the header.
    fn name(self) -> &'static CStr {
        match self {
            Self::Ok => c"HUSH_STATUS_OK",
            Self::NullPointer => c"HUSH_STATUS_NULL_POINTER",
            Self::InvalidArgument => c"HUSH_STATUS_INVALID_ARGUMENT",
            Self::TooLong => c"HUSH_STATUS_TOO_LONG",
            Self::UnsupportedSampleRate => c"HUSH_STATUS_UNSUPPORTED_SAMPLE_RATE",
            Self::NotFound => c"HUSH_STATUS_NOT_FOUND",
            Self::BadPackage => c"HUSH_STATUS_BAD_PACKAGE",
            Self::WrongModelKind => c"HUSH_STATUS_WRONG_MODEL_KIND",
            Self::BufferTooSmall => c"HUSH_STATUS_BUFFER_TOO_SMALL",
            Self::InvalidHandle => c"HUSH_STATUS_INVALID_HANDLE",
            Self::InferenceFailed => c"HUSH_STATUS_INFERENCE_FAILED",
            Self::TrainingFailed => c"HUSH_STATUS_TRAINING_FAILED",
            Self::InternalPanic => c"HUSH_STATUS_INTERNAL_PANIC",
        }
    }
}

/// A failed call: its status and the message `hush_last_error_message` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: HushStatus,
    pub message: String,
}

impl ApiError {
    pub fn new(status: HushStatus, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// Shorthand: an error of `status` saying `message`.
pub(crate) fn fail<T>(status: HushStatus, message: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::new(status, message))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A message never holds a NUL, but one from a path or a panic could: replace it
    // rather than lose the message.
    let text = CString::new(message.replace('\0', "\u{fffd}")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs an entry point's body: clears the thread's last error, catches a panic, and turns
/// the outcome into a status (setting the message on failure).
pub(crate) fn call(body: impl FnOnce() -> Result<(), ApiError>) -> HushStatus {
    set_last_error("");
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(ApiError::new(
            HushStatus::InternalPanic,
            format!("internal error (a bug in hush; please report it): {what}"),
        ))
    });
    match outcome {
        Ok(()) => HushStatus::Ok,
        Err(e) => {
            set_last_error(&e.message);
            e.status
        }
    }
}

/// `(HUSH_API_VERSION_MAJOR << 16) | HUSH_API_VERSION_MINOR` of the library linked; an app
/// checks the major half against the header it was built with.
#[no_mangle]
pub extern "C" fn hush_api_version() -> u32 {
    (HUSH_API_VERSION_MAJOR << 16) | HUSH_API_VERSION_MINOR
}

/// What the last failed `hush_*` call on this thread said (UTF-8, NUL-terminated, never
/// NULL): the argument or file involved and what was expected. Empty after a call that
/// succeeded. The pointer is valid until the next `hush_*` call on the same thread
/// (other than `hush_last_error_message`, `hush_status_name` and `hush_api_version`);
/// copy the text to keep it.
#[no_mangle]
pub extern "C" fn hush_last_error_message() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

/// The name of a status code, e.g. `"HUSH_STATUS_NULL_POINTER"` (a static string, never
/// NULL); `"HUSH_STATUS_UNKNOWN"` for a code this version does not know.
#[no_mangle]
pub extern "C" fn hush_status_name(status: i32) -> *const c_char {
    STATUSES
        .iter()
        .find(|s| **s as i32 == status)
        .map_or(c"HUSH_STATUS_UNKNOWN", |s| s.name())
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: hush_last_error_message returns a NUL-terminated string that stays valid
        // until the next hush call on this thread.
        unsafe { CStr::from_ptr(hush_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = call(|| panic!("boom at the boundary"));
        assert_eq!(status, HushStatus::InternalPanic);
        assert!(last().contains("boom at the boundary"), "{}", last());
        let status = call(|| std::panic::panic_any(7u8));
        assert_eq!(status, HushStatus::InternalPanic);
        assert!(last().contains("without a message"), "{}", last());
        assert_eq!(call(|| Ok(())), HushStatus::Ok);
        assert_eq!(last(), "");
    }

    #[test]
    fn errors_set_the_message_and_nul_bytes_do_not_lose_it() {
        let status = call(|| fail(HushStatus::BadPackage, "a\0b: broken"));
        assert_eq!(status, HushStatus::BadPackage);
        assert_eq!(last(), "a\u{fffd}b: broken");
    }

    #[test]
    fn status_names_match_the_codes() {
        for (i, s) in STATUSES.iter().enumerate() {
            assert_eq!(*s as i32, i as i32);
            // SAFETY: hush_status_name returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(hush_status_name(i as i32)) };
            assert!(name.to_str().unwrap().starts_with("HUSH_STATUS_"));
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(hush_status_name(-1)) };
        assert_eq!(unknown.to_str().unwrap(), "HUSH_STATUS_UNKNOWN");
        assert_eq!(hush_api_version() >> 16, HUSH_API_VERSION_MAJOR);
    }
}
