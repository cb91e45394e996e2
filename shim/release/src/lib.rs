//! germline's release component (DESIGN.md: "release"): the signed manifest, the rootfs tree
//! digest, cosign-format keys, sigstore bundles, OCI bundles and image layouts, TUF metadata,
//! and verification before extraction (paper Section VI, first paragraph; Fig. 1).

pub mod bundle;
pub mod digest;
pub mod error;
pub mod keys;
pub mod layer;
pub mod manifest;
pub mod oci;
pub mod release;
pub mod tuf;
pub mod untrusted;

pub use error::{Error, Result};
