//! The per-deployment CA with which the broker terminates TLS for declared hosts.
//!
//! Generated on first start under the broker's state directory (mode 0700, key 0600), outside
//! every container; the shim bind-mounts only the certificate into copies' trust stores.

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("CA file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CA: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

pub struct DeploymentCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_path: PathBuf,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl std::fmt::Debug for DeploymentCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentCa")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

/// The CA's parameters are fixed, so the issuer can be rebuilt from the key alone.
fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "germline deployment CA");
    p.distinguished_name
        .push(DnType::OrganizationName, "germline");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(p)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl DeploymentCa {
    /// Loads the CA from `dir`, generating it on first start.
    pub fn load_or_create(
        dir: &Path,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, CaError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
        let key_path = dir.join("ca.key");
        let cert_path = dir.join("ca.pem");
        let (key, cert_pem) = if key_path.exists() && cert_path.exists() {
            let key_pem = std::fs::read_to_string(&key_path).map_err(io(&key_path))?;
            let cert_pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
            (KeyPair::from_pem(&key_pem)?, cert_pem)
        } else {
            let key = KeyPair::generate()?;
            let cert = ca_params()?.self_signed(&key)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&key_path)
                .map_err(io(&key_path))?;
            std::io::Write::write_all(&mut f, key.serialize_pem().as_bytes())
                .map_err(io(&key_path))?;
            std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))?;
            (key, cert.pem())
        };
        Ok(Self {
            issuer: Issuer::new(ca_params()?, key),
            cert_pem,
            cert_path,
            leaves: Mutex::new(HashMap::new()),
            provider,
        })
    }

    /// The CA certificate (PEM) that copies must trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// A server configuration presenting a certificate for `host`, issued by this CA.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        if let Some(c) = self.leaves.lock().ok().and_then(|m| m.get(host).cloned()) {
            return Ok(c);
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name.push(DnType::CommonName, host);
        let cert = params.signed_by(&key, &self.issuer)?;
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        if let Ok(mut m) = self.leaves.lock() {
            m.insert(host.to_string(), cfg.clone());
        }
        Ok(cfg)
    }
}
