"""Verifies a key-based sigstore message-signature bundle with Python's `cryptography` (an
implementation independent of germline's): media type, key hint, SHA2_256 message digest,
signature (ECDSA P-256 SHA-256 DER, or pure Ed25519 — which @sigstore/verify cannot check,
since it always passes a digest name to Node's crypto.verify).
Usage: verify_bundle.py BUNDLE ARTIFACT PUBLIC_KEY_PEM"""
import base64, hashlib, json, sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

bundle = json.load(open(sys.argv[1]))
artifact = open(sys.argv[2], "rb").read()
key = serialization.load_pem_public_key(open(sys.argv[3], "rb").read())
assert bundle["mediaType"].startswith("application/vnd.dev.sigstore.bundle"), bundle["mediaType"]
spki = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
hint = bundle["verificationMaterial"]["publicKey"]["hint"]
assert hint == base64.b64encode(hashlib.sha256(spki).digest()).decode(), "hint names another key"
ms = bundle["messageSignature"]
assert ms["messageDigest"]["algorithm"] == "SHA2_256"
assert base64.b64decode(ms["messageDigest"]["digest"]) == hashlib.sha256(artifact).digest(), "digest"
sig = base64.b64decode(ms["signature"])
if isinstance(key, ed25519.Ed25519PublicKey):
    key.verify(sig, artifact)
else:
    key.verify(sig, artifact, ec.ECDSA(hashes.SHA256()))
print("cryptography: OK", type(key).__name__)
