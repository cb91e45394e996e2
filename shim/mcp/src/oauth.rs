//! `germline serve` as an OAuth 2.1 resource server (the MCP authorization spec, issue 29):
//! bearer JWTs signed by one configured issuer, whose public keys (a JWKS) are read from a
//! file at start; the token's audience must be this server's resource URI and it must not be
//! expired; its user is a configured claim. The protected-resource metadata (RFC 9728) tells a
//! client which authorization server to ask. Static bearer tokens (`--users`, `--token-file`,
//! the generated one) are checked first and keep working beside it.
//!
//! Signatures and the registered claims are checked by `jsonwebtoken` (docs/run.md says why);
//! this module picks the key, allows only asymmetric algorithms of the key's own family, and
//! turns the claim into a user name.

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

/// Where the metadata is served (and, with the resource's path appended, RFC 9728's
/// path-specific form).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Seconds of clock skew allowed on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;

/// The algorithms a token may be signed with: public-key ones only (a JWKS of an issuer
/// holds public keys; HMAC would make the verification key a shared secret).
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What `--oauth-*` configures.
pub struct OAuth {
    /// The issuer (`iss`) tokens must name, also the metadata's authorization server.
    pub issuer: String,
    /// This server's resource URI: the audience (`aud`) tokens must name.
    pub resource: String,
    /// The claim whose value is the session's user.
    pub user_claim: String,
    /// Where the JWKS comes from (`--oauth-jwks`), read again by [`OAuth::refresh`].
    pub source: Source,
    keys: std::sync::RwLock<Keys>,
}

/// The issuer's keys, each with its `kid`.
type Keys = Vec<(Option<String>, DecodingKey)>;

/// Where the JWKS is read from.
#[derive(Debug, Clone)]
pub enum Source {
    File(std::path::PathBuf),
    /// `https://...`, or `http://` on a loopback host only (a JWKS fetched in clear text from
    /// elsewhere could be anyone's keys).
    Url(url::Url),
}

impl Source {
    /// `--oauth-jwks`: a URL when it starts with `http://` or `https://`, else a file.
    pub fn parse(v: &str) -> Result<Source, String> {
        if !(v.starts_with("http://") || v.starts_with("https://")) {
            return Ok(Source::File(v.into()));
        }
        let u = url::Url::parse(v).map_err(|e| format!("{v}: {e}"))?;
        if u.scheme() == "http" && !is_loopback(&u) {
            return Err(format!(
                "{v}: a JWKS over plain http only from a loopback host (use https)"
            ));
        }
        Ok(Source::Url(u))
    }

    fn read(&self) -> Result<String, String> {
        match self {
            Source::File(p) => {
                std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
            }
            Source::Url(u) => fetch(u).map_err(|e| format!("{u}: {e}")),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Url(u) => write!(f, "{u}"),
        }
    }
}

fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// How long fetching the JWKS may take, and its largest size.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_JWKS: usize = 1 << 20;

/// GET a JWKS URL (blocking: at start, and on the refresh thread; never on serve's runtime).
fn fetch(u: &url::Url) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        tokio::time::timeout(FETCH_TIMEOUT, get(u))
            .await
            .map_err(|_| "timed out".to_string())?
    })
}

async fn get(u: &url::Url) -> Result<String, String> {
    use http_body_util::BodyExt;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let https = u.scheme() == "https";
    let host = u
        .host_str()
        .ok_or("no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = u.port_or_known_default().ok_or("no port")?;
    let mut path = u.path().to_string();
    if let Some(q) = u.query() {
        path = format!("{path}?{q}");
    }
    let authority = match u.port() {
        Some(p) => format!("{}:{p}", u.host_str().unwrap_or_default()),
        None => u.host_str().unwrap_or_default().to_string(),
    };
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/json")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|x| e(&x))?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|x| e(&x))?;
    let answer = if https {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|x| e(&x))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(host).map_err(|x| e(&x))?;
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|x| e(&x))?;
        exchange(hyper_util::rt::TokioIo::new(tls), req).await?
    } else {
        exchange(hyper_util::rt::TokioIo::new(tcp), req).await?
    };
    let (parts, body) = answer.into_parts();
    if parts.status != hyper::StatusCode::OK {
        return Err(format!("answered {}", parts.status));
    }
    let bytes = http_body_util::Limited::new(body, MAX_JWKS)
        .collect()
        .await
        .map_err(|x| e(&x))?
        .to_bytes();
    String::from_utf8(bytes.to_vec()).map_err(|_| "not UTF-8".to_string())
}

async fn exchange<I>(
    io: I,
    req: hyper::Request<http_body_util::Empty<bytes::Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|x| x.to_string())?;
    tokio::spawn(conn);
    sender.send_request(req).await.map_err(|x| x.to_string())
}

/// The keys of a JWKS's text; refuses a set without keys or with a symmetric (`oct`) key.
fn parse_jwks(text: &str) -> Result<Keys, String> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            return Err("a symmetric (oct) key has no place in an issuer's JWKS".into());
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("a key: {e}"))?;
        keys.push((jwk.common.key_id.clone(), key));
    }
    if keys.is_empty() {
        return Err("the JWKS has no keys".into());
    }
    Ok(keys)
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("user_claim", &self.user_claim)
            .field("source", &self.source)
            .finish()
    }
}

/// Why a token is refused (told to the client as `error_description`, never the token).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl OAuth {
    /// Reads the issuer's JWKS from `jwks` (a JSON file `{"keys": [...]}`, or a URL, see
    /// [`Source::parse`]); refuses a set without keys or with a symmetric (`oct`) key.
    pub fn load(
        issuer: &str,
        resource: &str,
        user_claim: &str,
        jwks: &str,
    ) -> Result<OAuth, String> {
        let source = Source::parse(jwks).map_err(|e| format!("--oauth-jwks {e}"))?;
        let text = source.read().map_err(|e| format!("--oauth-jwks {e}"))?;
        let mut o = OAuth::from_jwks(issuer, resource, user_claim, &text)
            .map_err(|e| format!("--oauth-jwks {source}: {e}"))?;
        o.source = source;
        Ok(o)
    }

    /// As [`OAuth::load`], from the JWKS's text.
    pub fn from_jwks(
        issuer: &str,
        resource: &str,
        user_claim: &str,
        text: &str,
    ) -> Result<OAuth, String> {
        let keys = parse_jwks(text)?;
        if issuer.is_empty() || resource.is_empty() || user_claim.is_empty() {
            return Err("the issuer, the resource and the user claim must not be empty".into());
        }
        Ok(OAuth {
            issuer: issuer.to_string(),
            resource: resource.to_string(),
            user_claim: user_claim.to_string(),
            source: Source::File(std::path::PathBuf::new()),
            keys: std::sync::RwLock::new(keys),
        })
    }

    /// Reads the JWKS again from its source; on any failure the keys stay as they were.
    pub fn refresh(&self) -> Result<usize, String> {
        let keys = parse_jwks(&self.source.read()?)?;
        let n = keys.len();
        *self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = keys;
        Ok(n)
    }

    /// Refreshes the keys every `every` on a thread of its own (the issuer's key rotation;
    /// a failure is told on stderr and the old keys serve on).
    pub fn refresh_every(self: &std::sync::Arc<Self>, every: std::time::Duration) {
        let me = std::sync::Arc::downgrade(self);
        std::thread::spawn(move || loop {
            std::thread::sleep(every);
            let Some(o) = me.upgrade() else { return };
            if let Err(e) = o.refresh() {
                eprintln!(
                    "germline serve: --oauth-jwks {}: refresh failed, keys kept: {e}",
                    o.source
                );
            }
        });
    }

    /// The protected-resource metadata (RFC 9728 section 2).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "germline serve",
        })
    }

    /// The metadata's URL for a `WWW-Authenticate` challenge: on the resource's origin.
    pub fn metadata_url(&self) -> String {
        match url::Url::parse(&self.resource) {
            Ok(mut u) => {
                u.set_path(METADATA_PATH);
                u.set_query(None);
                u.set_fragment(None);
                u.to_string()
            }
            Err(_) => METADATA_PATH.to_string(),
        }
    }

    /// The user a bearer JWT names, once its signature, issuer, audience and expiry hold.
    pub fn user(&self, token: &str) -> Result<String, Refused> {
        let refused = |why: &str| Refused(why.to_string());
        let header = jsonwebtoken::decode_header(token).map_err(|_| refused("not a JWT"))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(refused("the token's algorithm is not accepted"));
        }
        let keys = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = match &header.kid {
            Some(kid) => keys.iter().find(|(k, _)| k.as_deref() == Some(kid)),
            // Without a `kid` only a set of one key says which key is meant.
            None if keys.len() == 1 => keys.first(),
            None => None,
        };
        let Some((_, key)) = key else {
            return Err(refused("no key of the issuer signs this token"));
        };
        let mut v = Validation::new(header.alg);
        v.algorithms = vec![header.alg];
        v.leeway = LEEWAY_SECS;
        v.validate_nbf = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.resource]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Value>(token, key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            refused(match e.kind() {
                K::ExpiredSignature => "the token has expired",
                K::ImmatureSignature => "the token is not valid yet",
                K::InvalidAudience => "the token is not for this resource (aud)",
                K::InvalidIssuer => "the token is not from the configured issuer (iss)",
                K::InvalidSignature => "the token's signature does not verify",
                K::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                _ => "the token is not valid",
            })
        })?;
        let user = data
            .claims
            .get(&self.user_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| Refused(format!("the token has no {} claim", self.user_claim)))?;
        if !crate::serve::user_ok(user) {
            return Err(Refused(format!(
                "the {} claim is not a user name (letters, digits, . _ - @)",
                self.user_claim
            )));
        }
        Ok(user.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwks_must_hold_public_keys() {
        let oct = r#"{"keys":[{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0","alg":"HS256"}]}"#;
        let err =
            OAuth::from_jwks("https://i", "http://r/mcp", "sub", oct).expect_err("an oct key");
        assert!(err.contains("symmetric"), "{err}");
        let empty = r#"{"keys":[]}"#;
        let err = OAuth::from_jwks("https://i", "http://r/mcp", "sub", empty).expect_err("no keys");
        assert!(err.contains("no keys"), "{err}");
    }

    #[test]
    fn the_metadata_url_is_on_the_resource_origin() {
        let ec = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"a",
            "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;
        let o =
            OAuth::from_jwks("https://i", "http://127.0.0.1:9/mcp", "sub", ec).expect("an EC key");
        assert_eq!(
            o.metadata_url(),
            "http://127.0.0.1:9/.well-known/oauth-protected-resource"
        );
        assert_eq!(o.metadata()["authorization_servers"][0], "https://i");
        // An HMAC token is refused before any key is tried (no algorithm confusion).
        let hs = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
        assert!(o.user(hs).is_err());
    }
}
