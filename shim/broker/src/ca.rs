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

/// What a copy needs so that its TLS clients trust the deployment CA: files to bind-mount
/// read-only over the rootfs's CA bundles, and environment variables (DESIGN "Egress"). The
/// signed rootfs is never changed; the bundles are new files outside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyTrust {
    /// (bundle on the host, path inside the rootfs it covers)
    pub mounts: Vec<(PathBuf, PathBuf)>,
    pub env: Vec<(String, String)>,
}

/// Debian's bundle; certifi's (used by httpx, which ignores the system store) is found under
/// any site-packages or dist-packages of the rootfs.
const DEBIAN_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";

fn certifi_bundles(rootfs: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![rootfs.join("usr"), rootfs.join("opt")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                continue;
            }
            if ft.is_dir() {
                if p.ends_with("certifi") && p.join("cacert.pem").is_file() {
                    if let Ok(rel) = p.join("cacert.pem").strip_prefix(rootfs) {
                        out.push(rel.to_path_buf());
                    }
                } else if p.components().count() < rootfs.components().count() + 8 {
                    stack.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// The CA bundles a rootfs carries: each one's path relative to the rootfs and its text.
/// Reading only (a release's rootfs may belong to the user a daemon session runs for, who
/// must not make root read a file for them: [`rootfs_bundles`] then runs on a thread with
/// the user's permissions, and [`copy_trust_from`] writes as root).
#[derive(Debug, Clone)]
pub struct RootfsBundles(Vec<(PathBuf, String)>);

/// Adds every PEM certificate of the file at `path` to `roots`, for a TLS client that trusts a
/// CA the deployer names (the broker's `--upstream-ca`, the OTLP exporter's certificate). The
/// error says what was wrong with the file; a file without a certificate is an error, since
/// trusting nothing the deployer meant would fail later and less clearly.
pub fn add_pem_roots(roots: &mut rustls::RootCertStore, path: &Path) -> Result<usize, String> {
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let mut n = 0;
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        n += 1;
    }
    if n == 0 {
        return Err("no PEM certificate in the file".into());
    }
    Ok(n)
}

/// Reads the CA bundles of `rootfs` (Debian's, and every certifi's).
pub fn rootfs_bundles(rootfs: &Path) -> Result<RootfsBundles, CaError> {
    let mut targets = Vec::new();
    if rootfs.join(DEBIAN_BUNDLE).is_file() {
        targets.push(PathBuf::from(DEBIAN_BUNDLE));
    }
    targets.extend(certifi_bundles(rootfs));
    let mut out = Vec::new();
    for rel in targets {
        let src = rootfs.join(&rel);
        let text = std::fs::read_to_string(&src).map_err(io(&src))?;
        out.push((rel, text));
    }
    Ok(RootfsBundles(out))
}

/// Writes, under `out`, one bundle per CA file of `rootfs` (its own roots plus the deployment
/// CA) and says where each must be mounted.
pub fn copy_trust(rootfs: &Path, ca_pem: &str, out: &Path) -> Result<CopyTrust, CaError> {
    copy_trust_from(&rootfs_bundles(rootfs)?, ca_pem, out)
}

/// [`copy_trust`] of bundles already read.
pub fn copy_trust_from(
    bundles: &RootfsBundles,
    ca_pem: &str,
    out: &Path,
) -> Result<CopyTrust, CaError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut mounts = Vec::new();
    for (i, (rel, text)) in bundles.0.iter().enumerate() {
        let mut bundle = text.clone();
        if !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str("# germline deployment CA\n");
        bundle.push_str(ca_pem);
        let dst = out.join(format!("bundle-{i}.pem"));
        std::fs::write(&dst, bundle).map_err(io(&dst))?;
        mounts.push((dst, rel.clone()));
    }
    // Clients that read a variable get a path that exists in every copy: the Debian bundle if
    // the rootfs has one, otherwise a bundle of the deployment CA alone mounted at a fixed path.
    let ca_only = out.join("germline-ca.pem");
    std::fs::write(&ca_only, ca_pem).map_err(io(&ca_only))?;
    let in_copy = if bundles
        .0
        .first()
        .is_some_and(|(t, _)| t == Path::new(DEBIAN_BUNDLE))
    {
        format!("/{DEBIAN_BUNDLE}")
    } else {
        let at = germline_sys::paths::COPY_CA_PEM;
        mounts.push((ca_only.clone(), PathBuf::from(at.trim_start_matches('/'))));
        at.to_string()
    };
    let env = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"]
        .into_iter()
        .map(|k| (k.to_string(), in_copy.clone()))
        .collect();
    Ok(CopyTrust { mounts, env })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_roots_are_added_and_a_file_without_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca = DeploymentCa::load_or_create(&dir.path().join("ca"), provider).expect("ca");
        let two = dir.path().join("two.pem");
        std::fs::write(&two, format!("{}{}", ca.cert_pem(), ca.cert_pem())).expect("write");
        let mut roots = rustls::RootCertStore::empty();
        assert_eq!(add_pem_roots(&mut roots, &two), Ok(2));
        assert_eq!(roots.len(), 2);
        let none = dir.path().join("none.pem");
        std::fs::write(&none, "not a certificate\n").expect("write");
        let err = add_pem_roots(&mut roots, &none).expect_err("no certificate");
        assert!(err.contains("no PEM certificate"), "{err}");
        let err = add_pem_roots(&mut roots, &dir.path().join("absent.pem")).expect_err("absent");
        assert!(err.contains("No such file"), "{err}");
    }

    #[test]
    fn bundles_cover_debian_and_certifi() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        std::fs::create_dir_all(r.join("etc/ssl/certs")).expect("mkdir");
        std::fs::write(r.join(DEBIAN_BUNDLE), "DEBIAN-ROOTS").expect("write");
        let certifi = r.join("usr/lib/python3/dist-packages/certifi");
        std::fs::create_dir_all(&certifi).expect("mkdir");
        std::fs::write(certifi.join("cacert.pem"), "CERTIFI-ROOTS\n").expect("write");
        let out = tempfile::tempdir().expect("out");
        let t = copy_trust(r, "-----BEGIN CERTIFICATE-----\nX\n", out.path()).expect("trust");
        assert_eq!(t.mounts.len(), 2);
        assert_eq!(t.mounts[0].1, PathBuf::from(DEBIAN_BUNDLE));
        assert_eq!(
            t.mounts[1].1,
            PathBuf::from("usr/lib/python3/dist-packages/certifi/cacert.pem")
        );
        for (src, _) in &t.mounts {
            let s = std::fs::read_to_string(src).expect("bundle");
            assert!(
                s.contains("-ROOTS") && s.contains("BEGIN CERTIFICATE"),
                "{s}"
            );
        }
        assert!(t
            .env
            .iter()
            .all(|(_, v)| v == "/etc/ssl/certs/ca-certificates.crt"));
        // The signed rootfs is untouched.
        assert_eq!(
            std::fs::read_to_string(r.join(DEBIAN_BUNDLE)).expect("read"),
            "DEBIAN-ROOTS"
        );
    }
}
