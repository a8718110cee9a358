//! The caller's memory: every read of an input buffer or string and every write of an
//! output goes through these functions, which check the pointer (NULL, alignment) and the
//! length (against the API's maximum) before touching it. Errors name the argument.
//!
//! What cannot be checked from here, and the header states as each function's contract:
//! that a non-NULL pointer points to as many valid elements as its length says, that an
//! input string is NUL-terminated within its maximum, and that nothing else writes the
//! memory during the call.

use std::ffi::c_char;
use std::ptr::NonNull;

use crate::status::{fail, ApiError, HushStatus};

/// `p` checked: not NULL and aligned for `T`.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<NonNull<T>, ApiError> {
    let Some(checked) = NonNull::new(p.cast_mut()) else {
        return fail(HushStatus::NullPointer, format!("`{name}` is NULL"));
    };
    if !p.is_aligned() {
        return fail(
            HushStatus::NullPointer,
            format!(
                "`{name}` ({p:p}) is not aligned to {} bytes",
                std::mem::align_of::<T>()
            ),
        );
    }
    Ok(checked)
}

/// An output argument checked, to be written with [`put`].
pub(crate) fn out_ptr<T>(p: *mut T, name: &str) -> Result<NonNull<T>, ApiError> {
    non_null(p.cast_const(), name)
}

/// Writes `value` to a checked output.
///
/// # Safety
/// `p` came from [`out_ptr`] on a pointer the caller promised points to writable memory
/// for one `T`.
pub(crate) unsafe fn put<T>(p: NonNull<T>, value: T) {
    // SAFETY: non-null and aligned (checked by `out_ptr`); writable per the caller's contract.
    // `write` neither reads nor drops the old value, which may be uninitialised.
    unsafe { p.as_ptr().write(value) }
}

/// Writes `value` to `p` when it is a usable pointer, ignoring NULL: used to reset an
/// output (a length to 0, a handle to NULL) before anything can fail, so that a caller
/// who does not check the status never reads a stale value.
///
/// # Safety
/// As [`put`]: a non-NULL `p` must point to writable memory for one `T`.
pub(crate) unsafe fn reset<T>(p: *mut T, value: T) {
    if let Ok(p) = out_ptr(p, "") {
        // SAFETY: checked by `out_ptr`; writable per the caller's contract.
        unsafe { put(p, value) }
    }
}

/// `len` elements at `p`, an input buffer: `len` is checked against `max` first (so an
/// oversized length is refused without reading), then `p` (which may be NULL when `len`
/// is 0).
///
/// # Safety
/// A non-NULL `p` must point to `len` initialised `T`s that nothing writes during the
/// call.
pub(crate) unsafe fn slice<'a, T>(
    p: *const T,
    len: usize,
    max: usize,
    name: &str,
) -> Result<&'a [T], ApiError> {
    if len > max {
        return fail(
            HushStatus::TooLong,
            format!("`{name}`: {len} elements; the most one call takes is {max}"),
        );
    }
    if len == 0 {
        return Ok(&[]);
    }
    let p = non_null(p, name)?;
    // SAFETY: non-null and aligned (checked), `len` ≤ `max` elements (so the byte size is
    // far below isize::MAX for every `T` used here), initialised and unaliased per the
    // caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.as_ptr(), len) })
}

/// An output buffer of `cap` elements at `p` (which may be NULL when `cap` is 0), to be
/// written with [`write_slice`].
pub(crate) fn out_buffer<T>(
    p: *mut T,
    cap: usize,
    name: &str,
) -> Result<(*mut T, usize), ApiError> {
    if cap == 0 {
        return Ok((p, 0));
    }
    let p = out_ptr(p, name)?;
    Ok((p.as_ptr(), cap))
}

/// Copies `values` to the start of a checked output buffer.
///
/// # Safety
/// `(p, cap)` came from [`out_buffer`] on a pointer the caller promised points to `cap`
/// writable `T`s, and `values.len() <= cap`.
pub(crate) unsafe fn write_slice<T: Copy>((p, cap): (*mut T, usize), values: &[T]) {
    assert!(values.len() <= cap, "caller checked the capacity");
    if values.is_empty() {
        return;
    }
    // SAFETY: `p` is non-null and aligned (cap > 0 here, so `out_buffer` checked it),
    // writable for `cap` ≥ `values.len()` elements per the contract, and cannot overlap
    // `values`, which lives in memory this library owns.
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), p, values.len()) }
}

/// A NUL-terminated UTF-8 input string of at most `max` bytes before its NUL. The bytes
/// are read one by one up to the first NUL, and never past `max + 1` bytes.
///
/// # Safety
/// A non-NULL `p` must point to a NUL-terminated string, or to at least `max + 1`
/// readable bytes.
pub(crate) unsafe fn c_str<'a>(
    p: *const c_char,
    max: usize,
    name: &str,
) -> Result<&'a str, ApiError> {
    let p = non_null(p, name)?;
    let mut len = 0;
    loop {
        if len > max {
            return fail(
                HushStatus::TooLong,
                format!("`{name}` has no NUL within {max} bytes (the most it may hold)"),
            );
        }
        // SAFETY: bytes before the first NUL (and the NUL) are readable per the contract;
        // the loop stops at the first NUL or after max + 1 bytes.
        if unsafe { p.as_ptr().add(len).read() } == 0 {
            break;
        }
        len += 1;
    }
    // SAFETY: the `len` bytes before the NUL were just read, so they are readable and
    // initialised; the caller does not write them during the call.
    let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr().cast::<u8>(), len) };
    std::str::from_utf8(bytes).or_else(|e| {
        fail(
            HushStatus::InvalidArgument,
            format!("`{name}` is not UTF-8 (byte {})", e.valid_up_to()),
        )
    })
}

/// Checks that every sample is finite (the front-end needs finite samples); the error
/// names the first that is not.
pub(crate) fn finite(samples: &[f32], name: &str) -> Result<(), ApiError> {
    match samples.iter().position(|s| !s.is_finite()) {
        None => Ok(()),
        Some(i) => fail(
            HushStatus::InvalidArgument,
            format!("`{name}[{i}]` is {}: samples must be finite", samples[i]),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_lengths_and_strings_are_checked_before_use() {
        let e = non_null(std::ptr::null::<f32>(), "pcm").unwrap_err();
        assert_eq!(e.status, HushStatus::NullPointer);
        assert!(e.message.contains("`pcm`"));
        let v = [0u32; 2];
        let odd = v.as_ptr().cast::<u8>().wrapping_add(1).cast::<u32>();
        assert_eq!(
            non_null(odd, "x").unwrap_err().status,
            HushStatus::NullPointer
        );

        // SAFETY: the pointers below are NULL, or point to the arrays they are taken from.
        unsafe {
            assert_eq!(
                slice(std::ptr::null::<f32>(), 0, 4, "pcm").unwrap(),
                &[] as &[f32]
            );
            let err = slice(std::ptr::null::<f32>(), 5, 4, "pcm").unwrap_err();
            assert_eq!(err.status, HushStatus::TooLong);
            let err = slice(std::ptr::null::<f32>(), 3, 4, "pcm").unwrap_err();
            assert_eq!(err.status, HushStatus::NullPointer);
            let samples = [1.0f32, 2.0];
            assert_eq!(slice(samples.as_ptr(), 2, 4, "pcm").unwrap(), &samples);

            assert_eq!(c_str(c"models".as_ptr(), 6, "dir").unwrap(), "models");
            let err = c_str(c"models".as_ptr(), 5, "dir").unwrap_err();
            assert_eq!(err.status, HushStatus::TooLong);
            let bad = [0xffu8, 0];
            let err = c_str(bad.as_ptr().cast(), 5, "dir").unwrap_err();
            assert_eq!(err.status, HushStatus::InvalidArgument);
        }
        let err = finite(&[0.0, f32::NAN], "pcm").unwrap_err();
        assert_eq!(err.message, "`pcm[1]` is NaN: samples must be finite");
    }
}
