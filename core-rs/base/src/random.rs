//! Identifiers from the OS random source: VCIs, channel ids, probe names.

use crate::error::{Error, ErrorKind, Result};

/// How many times `random_u64` asks the OS before it gives up.
const RANDOM_TRIES: u32 = 64;

/// A random 64-bit identifier from the OS random source. Retries a bounded
/// number of times (EINTR, a short read), then fails: a loop that spins
/// forever on a broken random source would hang a monitor.
pub fn random_u64() -> Result<u64> {
    random_u64_from(&mut |buf: &mut [u8]| {
        // SAFETY: `buf` is a valid, writable buffer of the given length.
        let r = unsafe { libc::getrandom(buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    })
}

/// `random_u64` over any source (`fill` returns how many bytes it wrote).
fn random_u64_from(fill: &mut dyn FnMut(&mut [u8]) -> std::io::Result<usize>) -> Result<u64> {
    let mut b = [0u8; 8];
    let mut got = 0;
    let mut last = None;
    for _ in 0..RANDOM_TRIES {
        match fill(&mut b[got..]) {
            Ok(n) => got += n.min(8 - got),
            Err(e) => last = Some(e),
        }
        if got == 8 {
            return Ok(u64::from_le_bytes(b));
        }
    }
    Err(Error::new(
        ErrorKind::Os,
        format!(
            "the OS random source (getrandom) gave {got} of 8 bytes in {RANDOM_TRIES} tries{}",
            last.map(|e| format!(": {e}")).unwrap_or_default()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_source_failures_are_bounded() {
        let mut calls = 0;
        let e = random_u64_from(&mut |_| {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
        })
        .unwrap_err();
        assert_eq!(calls, RANDOM_TRIES);
        assert!(e.message.contains("getrandom") && e.message.contains("64 tries"), "{e}");
        // Short reads add up.
        let v = random_u64_from(&mut |b| {
            b[0] = 0xab;
            Ok(1)
        })
        .unwrap();
        assert_eq!(v, 0xabab_abab_abab_abab);
        assert_ne!(random_u64().unwrap(), random_u64().unwrap());
    }
}
