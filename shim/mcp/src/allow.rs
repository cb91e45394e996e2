//! `germline serve --allowed-hosts` and `--allowed-origins` (issue 29): the names a deployment
//! reaches `serve` by besides localhost, a Kubernetes Service's (`germline.tools`,
//! `germline.tools.svc.cluster.local`) or an Ingress's host, and the browser origins allowed to
//! call it. Each is named exactly: no wildcard, since a `*` would undo the DNS-rebinding guard
//! the list extends (docs/serve.md).

/// A `--allowed-hosts` entry as [`crate::http::host_of`] leaves a `Host` header: a DNS name
/// (lower case) or an IP address (IPv6 in brackets), without a port (the guard compares names;
/// the listener's port is the one the connection reached).
pub fn parse_host(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.contains('*') {
        return Err(format!(
            "{t:?}: no wildcards (they would let any rebound name through)"
        ));
    }
    let bare = t.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
    if let Ok(ip) = bare.unwrap_or(t).parse::<std::net::IpAddr>() {
        return Ok(match ip {
            std::net::IpAddr::V4(a) => a.to_string(),
            std::net::IpAddr::V6(a) => format!("[{a}]"),
        });
    }
    let name = t.to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "{t:?}: not a host name or an IP address (no port, no scheme)"
        ));
    }
    Ok(name)
}

/// A `--allowed-origins` entry: `scheme://host[:port]` as a browser sends it in `Origin`
/// (http or https; the default port left out), compared exactly.
pub fn parse_origin(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.contains('*') || t == "null" {
        return Err(format!("{t:?}: name one origin (no wildcard, no null)"));
    }
    let u = url::Url::parse(t).map_err(|e| format!("{t:?}: not an origin ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
        return Err(format!("{t:?}: an origin is http(s)://host[:port]"));
    }
    if u.path() != "/" || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty()
    {
        return Err(format!(
            "{t:?}: an origin has no path, query or user (scheme://host[:port])"
        ));
    }
    Ok(u.origin().ascii_serialization())
}

/// Whether an `Origin` header's value is one of `allowed` (already parsed by [`parse_origin`]).
pub fn origin_listed(origin: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return false;
    }
    match url::Url::parse(origin) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.path() == "/" => {
            let o = u.origin().ascii_serialization();
            allowed.contains(&o)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_names_or_addresses_without_wildcards_or_ports() {
        assert_eq!(
            parse_host("Germline.Tools.svc.cluster.local").as_deref(),
            Ok("germline.tools.svc.cluster.local")
        );
        assert_eq!(parse_host("germline").as_deref(), Ok("germline"));
        assert_eq!(parse_host("10.0.0.7").as_deref(), Ok("10.0.0.7"));
        assert_eq!(parse_host("fd00::1").as_deref(), Ok("[fd00::1]"));
        assert_eq!(parse_host("[FD00::1]").as_deref(), Ok("[fd00::1]"));
        for bad in [
            "*",
            "*.example.com",
            "",
            "a..b",
            "host:8080",
            "http://host",
            "-a.b",
            "a_b.c",
        ] {
            assert!(parse_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn origins_are_exact_and_compared_normalised() {
        let ok = parse_origin("https://App.Example.com").expect("origin");
        assert_eq!(ok, "https://app.example.com");
        assert_eq!(
            parse_origin("https://app.example.com:443").as_deref(),
            Ok("https://app.example.com")
        );
        assert_eq!(
            parse_origin("http://app.example.com:8080/").as_deref(),
            Ok("http://app.example.com:8080")
        );
        for bad in [
            "*",
            "null",
            "https://*.example.com",
            "ftp://x",
            "https://x/path",
            "https://u@x",
            "x",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad:?}");
        }
        let allowed = vec![ok];
        assert!(origin_listed("https://app.example.com", &allowed));
        assert!(origin_listed("https://APP.example.com:443", &allowed));
        assert!(!origin_listed("http://app.example.com", &allowed));
        assert!(!origin_listed("https://app.example.com.evil", &allowed));
        assert!(!origin_listed("https://app.example.com:8443", &allowed));
        assert!(!origin_listed("null", &allowed));
        assert!(!origin_listed("https://app.example.com", &[]));
    }
}
