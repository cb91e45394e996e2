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

use std::path::Path;

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
    keys: Vec<(Option<String>, DecodingKey)>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("user_claim", &self.user_claim)
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// Why a token is refused (told to the client as `error_description`, never the token).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl OAuth {
    /// Reads the issuer's JWKS from `jwks` (a JSON file `{"keys": [...]}`); refuses a set
    /// without keys or with a symmetric (`oct`) key.
    pub fn load(
        issuer: &str,
        resource: &str,
        user_claim: &str,
        jwks: &Path,
    ) -> Result<OAuth, String> {
        let text = std::fs::read_to_string(jwks)
            .map_err(|e| format!("--oauth-jwks {}: {e}", jwks.display()))?;
        OAuth::from_jwks(issuer, resource, user_claim, &text)
            .map_err(|e| format!("--oauth-jwks {}: {e}", jwks.display()))
    }

    /// As [`OAuth::load`], from the JWKS's text.
    pub fn from_jwks(
        issuer: &str,
        resource: &str,
        user_claim: &str,
        text: &str,
    ) -> Result<OAuth, String> {
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
        if issuer.is_empty() || resource.is_empty() || user_claim.is_empty() {
            return Err("the issuer, the resource and the user claim must not be empty".into());
        }
        Ok(OAuth {
            issuer: issuer.to_string(),
            resource: resource.to_string(),
            user_claim: user_claim.to_string(),
            keys,
        })
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
        let key = match &header.kid {
            Some(kid) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(kid)),
            // Without a `kid` only a set of one key says which key is meant.
            None if self.keys.len() == 1 => self.keys.first(),
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
