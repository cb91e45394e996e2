"""Publishes a TUF repository with python-tuf (consistent snapshots, one Ed25519 key for all
roles): REPO_DIR TARGET_NAME TARGET_FILE [--timestamp-expired] [--version N].
Writes REPO_DIR/metadata/{1.root,N.targets,N.snapshot}.json, timestamp.json and
REPO_DIR/targets/<sha256>.<name>; prints the key id."""
import argparse, hashlib, os
from datetime import datetime, timedelta, timezone

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import Metadata, MetaFile, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

ap = argparse.ArgumentParser()
ap.add_argument("repo"); ap.add_argument("name"); ap.add_argument("file")
ap.add_argument("--timestamp-expired", action="store_true")
a = ap.parse_args()

now = datetime.now(timezone.utc).replace(microsecond=0)
signer = CryptoSigner.generate_ed25519()
md_dir = os.path.join(a.repo, "metadata"); t_dir = os.path.join(a.repo, "targets")
os.makedirs(md_dir); os.makedirs(t_dir)

root = Metadata(Root(expires=now + timedelta(days=365), consistent_snapshot=True))
for role in ("root", "targets", "snapshot", "timestamp"):
    root.signed.add_key(signer.public_key, role)
data = open(a.file, "rb").read()
targets = Metadata(Targets(expires=now + timedelta(days=30)))
tf = TargetFile.from_data(a.name, data, ["sha256"])
tf.unrecognized_fields["custom"] = {"published_by": "python-tuf"}
targets.signed.targets[a.name] = tf
snapshot = Metadata(Snapshot(expires=now + timedelta(days=30)))
timestamp = Metadata(Timestamp(expires=now - timedelta(days=1) if a.timestamp_expired else now + timedelta(days=7)))

ser = JSONSerializer(compact=False)
def write(md, name):
    md.sign(signer)
    md.to_file(os.path.join(md_dir, name), ser)

write(root, "1.root.json")
write(targets, "1.targets.json")
snapshot.signed.meta["targets.json"] = MetaFile(version=targets.signed.version)
write(snapshot, "1.snapshot.json")
timestamp.signed.snapshot_meta = MetaFile(version=snapshot.signed.version)
write(timestamp, "timestamp.json")
with open(os.path.join(t_dir, f"{hashlib.sha256(data).hexdigest()}.{a.name}"), "wb") as f:
    f.write(data)
print(signer.public_key.keyid)
