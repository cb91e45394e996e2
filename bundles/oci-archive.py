#!/usr/bin/env python3
"""Make an OCI archive (a tar of an OCI image layout) that `podman load` and `ctr images import`
read, from a germline release's image layout (bundles/out/NAME/image), named REF. No registry.

    python3 bundles/oci-archive.py LAYOUT REF OUT.tar [--tamper PATH | --drop-germline]

--tamper PATH appends a byte to the file PATH of the one layer and rewrites the layer, diff_id,
config, manifest and index digests so that the image is a consistent OCI image whose content no
longer matches the signed rootfs digest: what a tampered registry image looks like. The input
layout is never modified. --drop-germline removes `.germline/` (the signed manifest): an
ordinary image, not a germline release; with it, --cmd '["ARG", ...]' sets the image's
command (the tests' pod sandbox image: python3 waiting for a signal). The input layout is never modified (bundles/out is hard-linked: new files are written instead)."""
import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile


def blob(layout, digest):
    return os.path.join(layout, "blobs", digest.replace(":", "/", 1))


def put(layout, data):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    with open(blob(layout, d), "wb") as f:
        f.write(data)
    return d, len(data)


def tamper(layout, path, drop=False, cmd=None):
    index = json.load(open(os.path.join(layout, "index.json")))
    mdesc = index["manifests"][0]
    manifest = json.load(open(blob(layout, mdesc["digest"])))
    config = json.load(open(blob(layout, manifest["config"]["digest"])))
    layer = manifest["layers"][0]
    raw = gzip.decompress(open(blob(layout, layer["digest"]), "rb").read())
    out = io.BytesIO()
    hit = False
    with tarfile.open(fileobj=io.BytesIO(raw)) as src, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name.lstrip("/")
            if drop and (name + "/").startswith(".germline/"):
                hit = True
                continue
            data = src.extractfile(m).read() if m.isfile() else None
            if path and m.isfile() and name == path.lstrip("/"):
                data += b"#"
                m.size = len(data)
                hit = True
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    if not hit:
        raise SystemExit(f"no {path or '.germline/'} in the layer")
    tar = out.getvalue()
    gz = gzip.compress(tar, mtime=0)
    layer["digest"], layer["size"] = put(layout, gz)
    config["rootfs"]["diff_ids"] = ["sha256:" + hashlib.sha256(tar).hexdigest()]
    if cmd is not None:
        if not isinstance(cmd, list) or not all(isinstance(c, str) for c in cmd):
            raise SystemExit("--cmd: expected a JSON list of strings")
        config.setdefault("config", {})["Entrypoint"] = None
        config["config"]["Cmd"] = cmd
    manifest["config"]["digest"], manifest["config"]["size"] = put(layout, json.dumps(config).encode())
    mdesc["digest"], mdesc["size"] = put(layout, json.dumps(manifest).encode())
    return index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layout")
    ap.add_argument("ref")
    ap.add_argument("out")
    ap.add_argument("--tamper")
    ap.add_argument("--drop-germline", action="store_true")
    ap.add_argument("--cmd", help="with --drop-germline: the image's command, a JSON list")
    a = ap.parse_args()
    if a.cmd and not a.drop_germline:
        raise SystemExit("--cmd needs --drop-germline (a release's command is signed)")
    with tempfile.TemporaryDirectory(prefix="germline-oci-") as tmp:
        lay = os.path.join(tmp, "layout")
        shutil.copytree(a.layout, lay)
        if a.tamper or a.drop_germline:
            index = tamper(lay, a.tamper, a.drop_germline, json.loads(a.cmd) if a.cmd else None)
        else:
            index = json.load(open(os.path.join(lay, "index.json")))
        index["manifests"] = index["manifests"][:1]
        index["manifests"][0].setdefault("annotations", {})["org.opencontainers.image.ref.name"] = a.ref
        os.remove(os.path.join(lay, "index.json"))
        with open(os.path.join(lay, "index.json"), "w") as f:
            json.dump(index, f)
        tmp_out = a.out + ".partial"
        with tarfile.open(tmp_out, "w") as t:
            for name in sorted(os.listdir(lay)):
                t.add(os.path.join(lay, name), arcname=name)
        os.replace(tmp_out, a.out)


if __name__ == "__main__":
    main()
