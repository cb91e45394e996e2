//! What a name in a policy or a call may be (docs/policy.md, "Accepted forms").
//!
//! Every check returns `Err(message)` with what was expected and what was found, the found
//! text escaped (`{:?}`) so an error line never carries a control character; a credential's
//! value is never echoed. The policy adds the file, line, column and field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The broker's state store, reached by copies as a pseudo-destination (docs/broker.md).
/// Every name under `germline` is reserved for the runtime.
pub const STATE_HOST: &str = "state.germline";

/// What a destination host name must look like.
pub const HOST_EXPECTED: &str = "expected a lowercase DNS host name (dot-separated labels of \
    a-z, 0-9 and '-', 1-63 bytes each, neither starting nor ending with '-', at most 253 bytes \
    in all; no scheme, port, path, wildcard or trailing dot; not an IP address)";

/// Checks a destination host name; `Err` says what was expected, what was found and why.
pub fn check_host(host: &str) -> Result<(), String> {
    host_problem(host).map_or(Ok(()), |why| {
        Err(format!("{HOST_EXPECTED}, found {host:?}: {why}"))
    })
}

/// Why `host` is not an acceptable destination name, or `None` if it is one.
fn host_problem(host: &str) -> Option<&'static str> {
    if host.is_empty() {
        return Some("the name is empty");
    }
    if host.contains("://") {
        return Some("a URL is not a host name: give only its host");
    }
    if is_ip_literal(host) {
        return Some(
            "an IP address is not a destination: declare a host name and pin it to the \
             address in [pins]",
        );
    }
    if host.contains('*') {
        return Some("wildcards are not allowed: list each host");
    }
    if host.contains('@') {
        return Some("user information is not part of a host name");
    }
    if host.contains(':') {
        return Some("a port is not part of a host name (a [pins] entry may set one)");
    }
    if host.contains('/') {
        return Some("a path is not part of a host name");
    }
    if !host.is_ascii() {
        return Some(
            "write an internationalised name in its ASCII (punycode, xn--) form, as DNS \
             carries it",
        );
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("host names are written in lowercase here");
    }
    if host.bytes().any(|b| b.is_ascii_whitespace()) {
        return Some("a host name has no white space");
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Some("only a-z, 0-9, '-' and '.' may appear");
    }
    if host.len() > 253 {
        return Some("the name is longer than 253 bytes");
    }
    if host.ends_with('.') && host.len() > 1 && !host[..host.len() - 1].ends_with('.') {
        return Some("write the name without its trailing dot");
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Some("a label is empty (a leading dot or two dots in a row)");
        }
        if label.len() > 63 {
            return Some("a label is longer than 63 bytes");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some("a label starts or ends with '-'");
        }
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("localhost is never a destination");
    }
    if host == "germline" || host.ends_with(".germline") {
        return Some(
            "names under `germline` are the runtime's own (state.germline is the broker's \
             state store)",
        );
    }
    None
}

/// `true` for a name that is an IP address in any spelling a resolver or a URL parser takes
/// as one: IPv6 with or without brackets or a zone, and any name whose last label is a number
/// (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`: the WHATWG URL standard's "ends in a
/// number" rule, which makes such hosts IPv4 addresses).
pub fn is_ip_literal(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    if h.starts_with('[') || h.parse::<IpAddr>().is_ok() || h.contains("::") {
        return true;
    }
    if h.contains(':')
        && h.bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return true;
    }
    let last = h.rsplit('.').next().unwrap_or(h);
    let lower = last.to_ascii_lowercase();
    (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
        || lower
            .strip_prefix("0x")
            .is_some_and(|x| x.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A consumer name (`agent`, a mail recipient, a blog): the rule of the manifest's
/// `consumers.names` (germline-release `valid_consumer`).
pub fn check_consumer(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
        return Err(format!(
            "expected a consumer name of 1-256 bytes without control characters, found {name:?}"
        ));
    }
    Ok(())
}

/// A release name as a manifest's `name` has it (germline-release `Manifest::validate`).
pub fn check_release_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(format!(
            "expected a release name as its manifest spells it ([A-Za-z0-9._-]+, not starting \
             with '.'), found {name:?}"
        ));
    }
    Ok(())
}

/// An item name: one file name, as a copy sees the item at `/run/items/<name>`.
pub fn check_item_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        Some("the name is empty")
    } else if name.len() > 255 {
        Some("longer than 255 bytes")
    } else if name.chars().any(char::is_control) {
        Some("it holds a control character")
    } else if name.contains('/') {
        Some("it holds '/'")
    } else if name.contains("..") {
        Some("it holds '..'")
    } else if name.starts_with('.') {
        Some("it starts with '.'")
    } else {
        None
    };
    why.map_or(Ok(()), |why| {
        Err(format!(
            "expected an item name of 1-255 bytes with no '/', no '..', no control character \
             and no leading '.', found {name:?}: {why}"
        ))
    })
}

/// A function (tool) name in a call file.
pub fn check_function(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(format!(
            "expected a tool name without control characters, found {name:?}"
        ));
    }
    Ok(())
}

/// Header fields the broker itself sets or that change how a request is framed or routed: a
/// credential may not replace them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
    "x-germline",
];

/// A credential's header name: an RFC 9110 token (`tchar`s), not one the broker controls.
pub fn check_header_name(name: &str) -> Result<(), String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(tchar) {
        return Err(format!(
            "expected a header field name (an RFC 9110 token: letters, digits and \
             !#$%&'*+-.^_`|~), found {name:?}"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(format!(
            "expected a header the broker does not set or frame requests with (not {}), \
             found {name:?}",
            RESERVED_HEADERS.join(", ")
        ));
    }
    Ok(())
}

/// A credential's query parameter name.
pub fn check_query_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'&' | b'=' | b'#' | b'?' | b'%'));
    if !ok {
        return Err(format!(
            "expected a query parameter name of 1-256 visible ASCII characters other than \
             & = # ? %, found {name:?}"
        ));
    }
    Ok(())
}

/// A credential's value (RFC 9110 `field-value`: visible ASCII, obs-text, and spaces or tabs
/// between them). The message never shows the value: it names the offending byte and where.
pub fn check_credential_value(value: &str) -> Result<(), String> {
    const EXPECTED: &str = "expected a non-empty header field value (visible characters, \
                            with spaces or tabs only between them; no CR, LF, NUL or other \
                            control character)";
    if value.is_empty() {
        return Err(format!("{EXPECTED}, found an empty value"));
    }
    let bytes = value.as_bytes();
    if let Some(i) = bytes
        .iter()
        .position(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(format!(
            "{EXPECTED}, found a value with the control character {:?} at byte {i} of {} \
             (the value is not shown)",
            char::from(bytes[i]),
            bytes.len()
        ));
    }
    if bytes
        .first()
        .into_iter()
        .chain(bytes.last())
        .any(|&b| b == b' ' || b == b'\t')
    {
        return Err(format!(
            "{EXPECTED}, found a value that starts or ends with a space or tab (the value is \
             not shown)"
        ));
    }
    Ok(())
}

/// An environment variable name (POSIX portable: `[A-Za-z_][A-Za-z0-9_]*`).
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut b = name.bytes();
    let ok = b
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !ok {
        return Err(format!(
            "expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*), found {name:?}"
        ));
    }
    Ok(())
}

/// Whether a pinned address can be the address of one host: not unspecified (`0.0.0.0`,
/// `::`, the whole of `0.0.0.0/8`), broadcast or reserved (`240.0.0.0/4`) or multicast, in
/// IPv4 or in IPv6 (also as an IPv4-mapped address). Loopback and private addresses stay
/// allowed: a pin may name an internal service.
pub fn pin_address_problem(ip: IpAddr) -> Option<&'static str> {
    fn v4(ip: Ipv4Addr) -> Option<&'static str> {
        let first = ip.octets()[0];
        if first == 0 {
            Some("an unspecified address (0.0.0.0/8) names no host")
        } else if ip.is_multicast() {
            Some("a multicast address names no one host")
        } else if first >= 240 {
            Some("a broadcast or reserved address (240.0.0.0/4) names no host")
        } else {
            None
        }
    }
    fn v6(ip: Ipv6Addr) -> Option<&'static str> {
        if let Some(m) = ip.to_ipv4_mapped() {
            return v4(m);
        }
        if ip.is_unspecified() {
            Some("an unspecified address (::) names no host")
        } else if ip.is_multicast() {
            Some("a multicast address names no one host")
        } else {
            None
        }
    }
    match ip {
        IpAddr::V4(a) => v4(a),
        IpAddr::V6(a) => v6(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_in_every_spelling() {
        for h in [
            "127.0.0.1",
            "127.1",
            "2130706433",
            "0x7f.1",
            "0x7F000001",
            "0177.0.0.1",
            "::1",
            "[::1]",
            "fe80::1%eth0",
            "::ffff:10.0.0.1",
            "1.2.3.4.",
            "x.0x",
        ] {
            assert!(is_ip_literal(h), "{h}");
            assert!(check_host(h).is_err(), "{h}");
        }
        for h in ["ocr.example", "1password.example", "0x.example", "ab.cd"] {
            assert!(!is_ip_literal(h), "{h}");
        }
    }

    #[test]
    fn host_messages_name_the_reason_and_escape() {
        let e = check_host("a\nb").expect_err("newline");
        assert!(e.contains("found \"a\\nb\""), "{e}");
        assert!(!e.contains('\n'));
        assert!(check_host("ocr.example").is_ok());
        assert!(check_host(STATE_HOST)
            .expect_err("state")
            .contains("germline"));
    }

    #[test]
    fn pins() {
        for a in [
            "0.0.0.0",
            "0.9.9.9",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "ff02::1",
        ] {
            let ip: IpAddr = a.parse().expect("ip");
            assert!(pin_address_problem(ip).is_some(), "{a}");
        }
        for a in [
            "127.0.0.1",
            "10.0.0.1",
            "::1",
            "::ffff:127.0.0.1",
            "192.0.2.1",
        ] {
            let ip: IpAddr = a.parse().expect("ip");
            assert!(pin_address_problem(ip).is_none(), "{a}");
        }
        let mapped: IpAddr = "::ffff:0.0.0.0".parse().expect("ip");
        assert!(pin_address_problem(mapped).is_some());
    }

    #[test]
    fn credential_values_are_never_echoed() {
        let e = check_credential_value("hunter2\r\n").expect_err("crlf");
        assert!(!e.contains("hunter2") && e.contains("byte 7"), "{e}");
        assert!(check_credential_value("Bearer a.b").is_ok());
    }
}
