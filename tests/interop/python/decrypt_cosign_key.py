"""Decrypts a cosign `ENCRYPTED SIGSTORE PRIVATE KEY` with an implementation independent of
germline's (hashlib's scrypt, PyNaCl's secretbox, cryptography's PKCS#8 parser) and prints
the public key as SPKI PEM. Usage: decrypt_cosign_key.py KEY_FILE (password in COSIGN_PASSWORD)."""
import base64, hashlib, json, os, sys

import nacl.secret
from cryptography.hazmat.primitives import serialization

text = open(sys.argv[1]).read().strip().splitlines()
assert text[0] == "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----", text[0]
assert text[-1] == "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----", text[-1]
body = json.loads(base64.b64decode("".join(text[1:-1])))
kdf, cipher = body["kdf"], body["cipher"]
assert kdf["name"] == "scrypt" and cipher["name"] == "nacl/secretbox", body
p = kdf["params"]
key = hashlib.scrypt(os.environ.get("COSIGN_PASSWORD", "").encode(), salt=base64.b64decode(kdf["salt"]),
                     n=p["N"], r=p["r"], p=p["p"], maxmem=64 * 1024 * 1024, dklen=32)
der = nacl.secret.SecretBox(key).decrypt(base64.b64decode(body["ciphertext"]), base64.b64decode(cipher["nonce"]))
private = serialization.load_der_private_key(der, password=None)
sys.stdout.write(private.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
