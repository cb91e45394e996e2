//! Keys in cosign's formats. `cosign.key` is a PEM block `ENCRYPTED SIGSTORE PRIVATE KEY` whose
//! body is JSON `{kdf: {name: "scrypt", params: {N, r, p}, salt}, cipher: {name:
//! "nacl/secretbox", nonce}, ciphertext}` (go-securesystemslib's `encrypted` format, byte fields
//! in standard base64), where ciphertext = secretbox(PKCS#8 DER, key = scrypt(password, salt)).
//! `cosign.pub` is a `PUBLIC KEY` PEM (SPKI DER). ECDSA P-256 is cosign's default; Ed25519 is
//! accepted as well.

use base64::{engine::general_purpose::STANDARD as B64, Engine as _};
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::XSalsa20Poly1305;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _,
};
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::path::Path;

use crate::error::{Error, Result};

/// The PEM type cosign 2.x writes (it still reads the older `ENCRYPTED COSIGN PRIVATE KEY`).
pub const PRIVATE_PEM: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
const PRIVATE_PEM_OLD: &str = "ENCRYPTED COSIGN PRIVATE KEY";
const SCRYPT_N: u32 = 32768;
const SCRYPT_R: u32 = 8;
const SCRYPT_P: u32 = 1;

/// Which signature algorithm a key uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Algorithm {
    /// ECDSA over NIST P-256 with SHA-256 (cosign's default).
    EcdsaP256,
    /// Ed25519 (pure, over the message).
    Ed25519,
}

/// A private signing key.
#[derive(Debug, Clone)]
pub enum SigningKey {
    EcdsaP256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

/// A public verification key.
#[derive(Debug, Clone)]
pub enum PublicKey {
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

#[derive(Serialize, Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}
#[derive(Serialize, Deserialize)]
struct Kdf {
    name: String,
    params: ScryptParams,
    salt: String,
}
#[derive(Serialize, Deserialize)]
struct ScryptParams {
    #[serde(rename = "N")]
    n: u32,
    r: u32,
    p: u32,
}
#[derive(Serialize, Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

impl SigningKey {
    /// A fresh key from the OS's random source.
    pub fn generate(alg: Algorithm) -> SigningKey {
        match alg {
            Algorithm::EcdsaP256 => {
                SigningKey::EcdsaP256(p256::ecdsa::SigningKey::random(&mut OsRng))
            }
            Algorithm::Ed25519 => {
                SigningKey::Ed25519(ed25519_dalek::SigningKey::generate(&mut OsRng))
            }
        }
    }

    pub fn public(&self) -> PublicKey {
        match self {
            SigningKey::EcdsaP256(k) => PublicKey::EcdsaP256(*k.verifying_key()),
            SigningKey::Ed25519(k) => PublicKey::Ed25519(k.verifying_key()),
        }
    }

    /// PKCS#8 DER, as Go's `x509.MarshalPKCS8PrivateKey` writes it (Ed25519: v1, seed only).
    pub fn to_pkcs8_der(&self) -> Result<Vec<u8>> {
        let der = match self {
            SigningKey::EcdsaP256(k) => p256::pkcs8::EncodePrivateKey::to_pkcs8_der(k),
            SigningKey::Ed25519(k) => {
                let kp = ed25519_dalek::pkcs8::KeypairBytes {
                    secret_key: k.to_bytes(),
                    public_key: None,
                };
                kp.to_pkcs8_der()
            }
        }
        .map_err(|e| Error::Usage(format!("encoding PKCS#8: {e}")))?;
        Ok(der.as_bytes().to_vec())
    }

    pub fn from_pkcs8_der(der: &[u8], file: &str) -> Result<SigningKey> {
        let p256 = || {
            <p256::ecdsa::SigningKey as p256::pkcs8::DecodePrivateKey>::from_pkcs8_der(der)
                .map(SigningKey::EcdsaP256)
        };
        let ed25519 = || ed25519_dalek::SigningKey::from_pkcs8_der(der).map(SigningKey::Ed25519);
        first_key(
            p256,
            ed25519,
            file,
            "decrypted key is neither an ECDSA P-256 nor an Ed25519 PKCS#8 key",
        )
    }

    /// The `ENCRYPTED SIGSTORE PRIVATE KEY` PEM text.
    pub fn to_encrypted_pem(&self, password: &[u8]) -> Result<String> {
        let mut salt = [0u8; 32];
        let mut nonce = [0u8; 24];
        OsRng.fill_bytes(&mut salt);
        OsRng.fill_bytes(&mut nonce);
        let key = scrypt_key(password, &salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)?;
        let der = self.to_pkcs8_der()?;
        let cipher = XSalsa20Poly1305::new(&key.into());
        let ct = cipher
            .encrypt(&nonce.into(), der.as_slice())
            .map_err(|_| Error::Usage("secretbox encryption failed".into()))?;
        let body = Encrypted {
            kdf: Kdf {
                name: "scrypt".into(),
                params: ScryptParams {
                    n: SCRYPT_N,
                    r: SCRYPT_R,
                    p: SCRYPT_P,
                },
                salt: B64.encode(salt),
            },
            cipher: Cipher {
                name: "nacl/secretbox".into(),
                nonce: B64.encode(nonce),
            },
            ciphertext: B64.encode(ct),
        };
        let json = serde_json::to_vec(&body).map_err(|e| Error::Usage(e.to_string()))?;
        Ok(pem_lf(&pem::Pem::new(PRIVATE_PEM, json)))
    }

    /// Reads a cosign private key file; `password` as given in `COSIGN_PASSWORD`.
    pub fn from_encrypted_pem(text: &[u8], password: &[u8], file: &str) -> Result<SigningKey> {
        let kerr = |message: String| Error::Key {
            file: file.into(),
            message,
        };
        let block = pem::parse(text).map_err(|e| kerr(format!("not a PEM file: {e}")))?;
        if block.tag() != PRIVATE_PEM && block.tag() != PRIVATE_PEM_OLD {
            return Err(kerr(format!(
                "expected a PEM block \"{PRIVATE_PEM}\", found \"{}\"",
                block.tag()
            )));
        }
        let enc: Encrypted = serde_json::from_slice(block.contents())
            .map_err(|e| kerr(format!("encrypted key body is not the expected JSON: {e}")))?;
        if enc.kdf.name != "scrypt" {
            return Err(kerr(format!(
                "kdf.name: expected \"scrypt\", found {:?}",
                enc.kdf.name
            )));
        }
        if enc.cipher.name != "nacl/secretbox" {
            return Err(kerr(format!(
                "cipher.name: expected \"nacl/secretbox\", found {:?}",
                enc.cipher.name
            )));
        }
        let p = &enc.kdf.params;
        // Like cosign, accept only the standard parameters: a key file must not make us spend
        // unbounded memory or time.
        if (p.n, p.r, p.p) != (SCRYPT_N, SCRYPT_R, SCRYPT_P) {
            return Err(kerr(format!(
                "kdf.params: expected N=32768 r=8 p=1, found N={} r={} p={}",
                p.n, p.r, p.p
            )));
        }
        let salt = B64
            .decode(&enc.kdf.salt)
            .map_err(|e| kerr(format!("kdf.salt: {e}")))?;
        let nonce = B64
            .decode(&enc.cipher.nonce)
            .map_err(|e| kerr(format!("cipher.nonce: {e}")))?;
        let nonce: [u8; 24] = nonce
            .try_into()
            .map_err(|_| kerr("cipher.nonce: expected 24 bytes".into()))?;
        let ct = B64
            .decode(&enc.ciphertext)
            .map_err(|e| kerr(format!("ciphertext: {e}")))?;
        let key = scrypt_key(password, &salt, p.n, p.r, p.p)?;
        let der = XSalsa20Poly1305::new(&key.into())
            .decrypt(&nonce.into(), ct.as_slice())
            .map_err(|_| Error::KeyPassword { file: file.into() })?;
        SigningKey::from_pkcs8_der(&der, file)
    }

    /// Signs `msg` as cosign does: ECDSA-P256-SHA256 (ASN.1 DER signature) or pure Ed25519.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        use p256::ecdsa::signature::Signer as _;
        match self {
            SigningKey::EcdsaP256(k) => {
                let s: p256::ecdsa::Signature = k.sign(msg);
                s.to_der().as_bytes().to_vec()
            }
            SigningKey::Ed25519(k) => k.sign(msg).to_bytes().to_vec(),
        }
    }
}

/// PEM with `\n` line endings, as Go's encoding/pem (and so cosign) writes it.
/// The key the first of two decodings yields (ECDSA P-256, then Ed25519), else a `Key` error
/// on `file` saying `message`.
fn first_key<K, E1, E2>(
    p256: impl FnOnce() -> std::result::Result<K, E1>,
    ed25519: impl FnOnce() -> std::result::Result<K, E2>,
    file: &str,
    message: &str,
) -> Result<K> {
    p256()
        .ok()
        .or_else(|| ed25519().ok())
        .ok_or_else(|| Error::Key {
            file: file.into(),
            message: message.into(),
        })
}

fn pem_lf(p: &pem::Pem) -> String {
    pem::encode_config(
        p,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

fn scrypt_key(password: &[u8], salt: &[u8], n: u32, r: u32, p: u32) -> Result<[u8; 32]> {
    let log_n = u8::try_from(n.trailing_zeros()).map_err(|_| Error::Usage("scrypt N".into()))?;
    let params = scrypt::Params::new(log_n, r, p, 32)
        .map_err(|e| Error::Usage(format!("scrypt params: {e}")))?;
    let mut out = [0u8; 32];
    scrypt::scrypt(password, salt, &params, &mut out)
        .map_err(|e| Error::Usage(format!("scrypt: {e}")))?;
    Ok(out)
}

impl PublicKey {
    /// SPKI DER.
    pub fn to_spki_der(&self) -> Result<Vec<u8>> {
        let doc = match self {
            PublicKey::EcdsaP256(k) => p256::pkcs8::EncodePublicKey::to_public_key_der(k),
            PublicKey::Ed25519(k) => k.to_public_key_der(),
        }
        .map_err(|e| Error::Usage(format!("encoding SPKI: {e}")))?;
        Ok(doc.as_bytes().to_vec())
    }

    /// `PUBLIC KEY` PEM text, as cosign's `cosign.pub`.
    pub fn to_pem(&self) -> Result<String> {
        Ok(pem_lf(&pem::Pem::new("PUBLIC KEY", self.to_spki_der()?)))
    }

    pub fn from_pem(text: &[u8], file: &str) -> Result<PublicKey> {
        let kerr = |message: String| Error::Key {
            file: file.into(),
            message,
        };
        let block = pem::parse(text).map_err(|e| kerr(format!("not a PEM file: {e}")))?;
        if block.tag() != "PUBLIC KEY" {
            return Err(kerr(format!(
                "expected a PEM block \"PUBLIC KEY\", found \"{}\"",
                block.tag()
            )));
        }
        Self::from_spki_der(block.contents(), file)
    }

    pub fn from_spki_der(der: &[u8], file: &str) -> Result<PublicKey> {
        let p256 = || {
            <p256::ecdsa::VerifyingKey as p256::pkcs8::DecodePublicKey>::from_public_key_der(der)
                .map(PublicKey::EcdsaP256)
        };
        let ed25519 =
            || ed25519_dalek::VerifyingKey::from_public_key_der(der).map(PublicKey::Ed25519);
        first_key(
            p256,
            ed25519,
            file,
            "expected an ECDSA P-256 or Ed25519 public key (SPKI)",
        )
    }

    /// The sigstore bundle's `publicKey.hint`: base64 of sha256(SPKI DER), as cosign writes it.
    pub fn hint(&self) -> Result<String> {
        Ok(B64.encode(Sha256::digest(self.to_spki_der()?)))
    }

    /// `sha256:<hex>` of the SPKI DER: the publisher key fingerprint `inspect` shows.
    pub fn fingerprint(&self) -> Result<String> {
        Ok(format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.to_spki_der()?))
        ))
    }

    pub fn algorithm(&self) -> &'static str {
        match self {
            PublicKey::EcdsaP256(_) => "ecdsa-p256-sha256",
            PublicKey::Ed25519(_) => "ed25519",
        }
    }

    /// Verifies `sig` over `msg`; `Err` carries why, for the refusal message.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> std::result::Result<(), String> {
        use p256::ecdsa::signature::Verifier as _;
        match self {
            PublicKey::EcdsaP256(k) => {
                let s = p256::ecdsa::Signature::from_der(sig)
                    .map_err(|_| "signature is not an ASN.1 DER ECDSA signature (is it by a key of another type?)".to_string())?;
                k.verify(msg, &s).map_err(|_| String::new())
            }
            PublicKey::Ed25519(k) => {
                let s = ed25519_dalek::Signature::from_slice(sig)
                    .map_err(|_| "signature is not a 64-byte Ed25519 signature".to_string())?;
                k.verify_strict(msg, &s).map_err(|_| String::new())
            }
        }
    }
}

/// Reads the password like cosign: `COSIGN_PASSWORD` (empty if unset).
pub fn password_from_env() -> Vec<u8> {
    std::env::var_os("COSIGN_PASSWORD")
        .map(|v| std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()).to_vec())
        .unwrap_or_default()
}

/// `germline keygen`: writes `<prefix>.key` (mode 0600) and `<prefix>.pub`; refuses to
/// overwrite existing files.
pub fn keygen(dir: &Path, prefix: &str, alg: Algorithm, password: &[u8]) -> Result<PublicKey> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let key = SigningKey::generate(alg);
    let pem = key.to_encrypted_pem(password)?;
    let kp = dir.join(format!("{prefix}.key"));
    let pp = dir.join(format!("{prefix}.pub"));
    for p in [&kp, &pp] {
        if p.exists() {
            return Err(Error::Usage(format!(
                "{} already exists; refusing to overwrite",
                p.display()
            )));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&kp)
        .map_err(|e| Error::io(&kp, e))?;
    f.write_all(pem.as_bytes()).map_err(|e| Error::io(&kp, e))?;
    let public = key.public();
    std::fs::write(&pp, public.to_pem()?).map_err(|e| Error::io(&pp, e))?;
    Ok(public)
}

/// Loads a private key file with the password from the environment.
pub fn load_signing_key(path: &Path) -> Result<SigningKey> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    SigningKey::from_encrypted_pem(&text, &password_from_env(), &path.display().to_string())
}

/// Loads a `PUBLIC KEY` PEM file.
pub fn load_public_key(path: &Path) -> Result<PublicKey> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    PublicKey::from_pem(&text, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encrypted_pem_round_trips_and_wrong_password_fails() -> Result<()> {
        for alg in [Algorithm::EcdsaP256, Algorithm::Ed25519] {
            let k = SigningKey::generate(alg);
            let pem = k.to_encrypted_pem(b"pw")?;
            assert!(pem.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
            let back = SigningKey::from_encrypted_pem(pem.as_bytes(), b"pw", "k")?;
            let sig = back.sign(b"msg");
            k.public().verify(b"msg", &sig).map_err(Error::Usage)?;
            assert!(k.public().verify(b"msh", &sig).is_err());
            let e = SigningKey::from_encrypted_pem(pem.as_bytes(), b"other", "k")
                .expect_err("wrong pw");
            assert!(matches!(e, Error::KeyPassword { .. }));
            let pubpem = k.public().to_pem()?;
            assert_eq!(
                PublicKey::from_pem(pubpem.as_bytes(), "p")?.hint()?,
                k.public().hint()?
            );
        }
        Ok(())
    }
}
