//! Random identifiers (bearer tokens, session ids, trace and span ids).

/// `n` bytes from the kernel's CSPRNG, hex-encoded (tokens and session ids).
pub fn random_hex(n: usize) -> Result<String, RandomError> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which we own.
        let r = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), n - got, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(RandomError(e));
        }
        got += r as usize;
    }
    Ok(hex::encode(buf))
}

/// The kernel's CSPRNG failed ([`random_hex`]).
#[derive(Debug, thiserror::Error)]
#[error("getrandom: {0}")]
pub struct RandomError(#[source] pub std::io::Error);
