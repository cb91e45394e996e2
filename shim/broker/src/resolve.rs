//! Name resolution, done by the broker only (issue 5, item 3).
//!
//! Only declared hosts are ever resolved: a DNS query for an undeclared name is itself a
//! channel. A pinned host uses its pinned address. IP literals and `localhost` are never
//! destinations, and a declared name that resolves only to loopback, link-local, private,
//! shared or metadata addresses is refused unless pinned.

use std::net::{IpAddr, SocketAddr};

use germline_policy::policy::Pin;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ResolveError {
    #[error("IP literals are not destinations")]
    IpLiteral,
    #[error("localhost is not a destination")]
    Localhost,
    #[error("name resolution failed")]
    Failed,
    #[error("resolves only to internal addresses (loopback, link-local, private or metadata) and is not pinned")]
    Internal,
}

/// `true` for a host name that is an IP literal (v4, or v6 with or without brackets).
pub fn is_ip_literal(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.parse::<IpAddr>().is_ok()
}

/// Addresses a destination must never reach unless the deployer pins them.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // shared address space 100.64/10
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || v6.to_ipv4_mapped().is_some_and(|v4| is_internal(IpAddr::V4(v4)))
        }
    }
}

/// Checks a host name before anything else looks at it.
pub fn check_name(host: &str) -> Result<(), ResolveError> {
    if is_ip_literal(host) {
        return Err(ResolveError::IpLiteral);
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Err(ResolveError::Localhost);
    }
    Ok(())
}

/// Resolves a declared host to the one address this request uses.
pub async fn resolve(host: &str, port: u16, pin: Option<Pin>) -> Result<SocketAddr, ResolveError> {
    check_name(host)?;
    if let Some(pin) = pin {
        return Ok(SocketAddr::new(pin.ip, pin.port.unwrap_or(port)));
    }
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| ResolveError::Failed)?;
    let mut any = false;
    for a in addrs {
        any = true;
        if !is_internal(a.ip()) {
            return Ok(a);
        }
    }
    Err(if any {
        ResolveError::Internal
    } else {
        ResolveError::Failed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(is_internal(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1"] {
            assert!(!is_internal(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(check_name("127.0.0.1"), Err(ResolveError::IpLiteral));
        assert_eq!(check_name("[::1]"), Err(ResolveError::IpLiteral));
        assert_eq!(check_name("localhost"), Err(ResolveError::Localhost));
        assert_eq!(check_name("ocr.example"), Ok(()));
    }
}
