//! Sigstore bundles with a message signature and a public-key hint, as
//! `cosign sign-blob --key K --bundle B --tlog-upload=false` writes them (media type
//! `application/vnd.dev.sigstore.bundle.v0.3+json`). Older media-type names are accepted.
//! Verification here is key-based and offline: the digest of the artifact, then the signature
//! with the pinned key. Transparency-log entries, if a bundle carries any, are not needed for
//! key-based trust and are not consulted.

use base64::{engine::general_purpose::STANDARD as B64, Engine as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};
use crate::keys::{PublicKey, SigningKey};

pub const MEDIA_TYPE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// Every media type we read.
pub const ACCEPTED_MEDIA_TYPES: &[&str] = &[
    MEDIA_TYPE_V03,
    "application/vnd.dev.sigstore.bundle.v0.2+json",
    "application/vnd.dev.sigstore.bundle.v0.1+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
];

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    pub media_type: String,
    pub verification_material: VerificationMaterial,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_signature: Option<MessageSignature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsse_envelope: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMaterial {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<PublicKeyIdentifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x509_certificate_chain: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tlog_entries: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_verification_data: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PublicKeyIdentifier {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSignature {
    pub message_digest: MessageDigest,
    pub signature: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct MessageDigest {
    pub algorithm: String,
    pub digest: String,
}

/// Signs `artifact` and returns the bundle JSON (compact, one line, like cosign).
pub fn sign(key: &SigningKey, artifact: &[u8]) -> Result<Vec<u8>> {
    let bundle = Bundle {
        media_type: MEDIA_TYPE_V03.into(),
        verification_material: VerificationMaterial {
            public_key: Some(PublicKeyIdentifier {
                hint: Some(key.public().hint()?),
            }),
            certificate: None,
            x509_certificate_chain: None,
            tlog_entries: Vec::new(),
            timestamp_verification_data: None,
        },
        message_signature: Some(MessageSignature {
            message_digest: MessageDigest {
                algorithm: "SHA2_256".into(),
                digest: B64.encode(Sha256::digest(artifact)),
            },
            signature: B64.encode(key.sign(artifact)),
        }),
        dsse_envelope: None,
    };
    let mut v = serde_json::to_vec(&bundle).map_err(|e| Error::Usage(e.to_string()))?;
    v.push(b'\n');
    Ok(v)
}

/// What verification established, for `inspect`.
#[derive(Debug, Clone)]
pub struct Verified {
    pub media_type: String,
    pub hint: Option<String>,
    pub fingerprint: String,
}

/// Verifies a bundle over `artifact` with the pinned key, in this order: media type, shape,
/// key hint (if present) against the pinned key, message digest, signature.
pub fn verify(
    bundle_bytes: &[u8],
    artifact: &[u8],
    key: &PublicKey,
    file: &str,
) -> Result<Verified> {
    let berr = |field: &str, message: String| Error::Bundle {
        file: file.into(),
        field: field.into(),
        message,
    };
    let bundle: Bundle = serde_json::from_slice(bundle_bytes).map_err(|e| Error::Json {
        file: file.into(),
        what: "sigstore bundle",
        message: e.to_string(),
    })?;
    if !ACCEPTED_MEDIA_TYPES.contains(&bundle.media_type.as_str()) {
        return Err(berr(
            "mediaType",
            format!(
                "expected one of {ACCEPTED_MEDIA_TYPES:?}, found {:?}",
                bundle.media_type
            ),
        ));
    }
    if bundle.dsse_envelope.is_some() {
        return Err(berr(
            "dsseEnvelope",
            "expected a messageSignature bundle; DSSE envelopes are not releases".into(),
        ));
    }
    let ms = bundle.message_signature.ok_or_else(|| {
        berr(
            "messageSignature",
            "missing: the bundle carries no signature (unsigned manifest)".into(),
        )
    })?;
    let fingerprint = key.fingerprint()?;
    let hint = bundle
        .verification_material
        .public_key
        .as_ref()
        .and_then(|p| p.hint.clone());
    if let Some(h) = &hint {
        if h != &key.hint()? {
            return Err(Error::BadSignature {
                file: file.into(),
                fingerprint,
                detail: format!(
                    ": the bundle names another key (hint {h}), signature by another key"
                ),
            });
        }
    }
    if ms.message_digest.algorithm != "SHA2_256" {
        return Err(berr(
            "messageSignature.messageDigest.algorithm",
            format!(
                "expected \"SHA2_256\", found {:?}",
                ms.message_digest.algorithm
            ),
        ));
    }
    let digest = B64.decode(&ms.message_digest.digest).map_err(|e| {
        berr(
            "messageSignature.messageDigest.digest",
            format!("not base64: {e}"),
        )
    })?;
    let actual = Sha256::digest(artifact);
    if digest.as_slice() != actual.as_slice() {
        return Err(berr(
            "messageSignature.messageDigest.digest",
            format!(
                "the signed artifact's sha256 is {}, the bundle records {}",
                hex::encode(actual),
                hex::encode(&digest)
            ),
        ));
    }
    let sig = B64
        .decode(&ms.signature)
        .map_err(|e| berr("messageSignature.signature", format!("not base64: {e}")))?;
    key.verify(artifact, &sig)
        .map_err(|why| Error::BadSignature {
            file: file.into(),
            fingerprint: fingerprint.clone(),
            detail: if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            },
        })?;
    Ok(Verified {
        media_type: bundle.media_type,
        hint,
        fingerprint,
    })
}

/// The publisher key fingerprint (`sha256:<hex>` of its SPKI) a bundle's hint names, unverified.
pub fn hint_fingerprint(bundle_bytes: &[u8]) -> Option<String> {
    let b: Bundle = serde_json::from_slice(bundle_bytes).ok()?;
    let h = b.verification_material.public_key?.hint?;
    let raw = B64.decode(h).ok()?;
    (raw.len() == 32).then(|| format!("sha256:{}", hex::encode(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Algorithm;

    #[test]
    fn sign_verify_and_refusals() -> Result<()> {
        let k = SigningKey::generate(Algorithm::EcdsaP256);
        let other = SigningKey::generate(Algorithm::EcdsaP256);
        let b = sign(&k, b"artifact")?;
        verify(&b, b"artifact", &k.public(), "b")?;
        let e = verify(&b, b"artifacT", &k.public(), "b")
            .expect_err("digest")
            .to_string();
        assert!(e.contains("messageDigest.digest"), "{e}");
        let e = verify(&b, b"artifact", &other.public(), "b")
            .expect_err("other key")
            .to_string();
        assert!(e.contains("another key"), "{e}");
        let e = verify(&b[..b.len() / 2], b"artifact", &k.public(), "b")
            .expect_err("truncated")
            .to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        // Older media type names are read.
        let old = String::from_utf8_lossy(&b).replace(
            MEDIA_TYPE_V03,
            "application/vnd.dev.sigstore.bundle+json;version=0.1",
        );
        verify(old.as_bytes(), b"artifact", &k.public(), "b")?;
        Ok(())
    }
}
