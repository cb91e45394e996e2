"""Reads a TUF repository with python-tuf's client (ngclient) over a loopback HTTP server that
this script starts on 127.0.0.1 and stops: REPO_DIR TRUSTED_ROOT TARGET_NAME WORK_DIR.
Prints JSON: the target's length, sha256, custom field and the downloaded file's sha256."""
import functools, hashlib, http.server, json, os, sys, threading

from tuf.ngclient import Updater

repo, trusted_root, name, work = sys.argv[1:5]
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

handler = functools.partial(Quiet, directory=repo)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
thread = threading.Thread(target=server.serve_forever, daemon=True)
thread.start()
try:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    md_dir = os.path.join(work, "metadata"); dl_dir = os.path.join(work, "download")
    os.makedirs(md_dir, exist_ok=True); os.makedirs(dl_dir, exist_ok=True)
    up = Updater(metadata_dir=md_dir, metadata_base_url=f"{base}/metadata/",
                 target_base_url=f"{base}/targets/", target_dir=dl_dir,
                 bootstrap=open(trusted_root, "rb").read())
    up.refresh()
    info = up.get_targetinfo(name)
    if info is None:
        sys.exit(f"python-tuf: no target {name}")
    path = up.download_target(info)
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    print(json.dumps({"target": name, "length": info.length, "sha256": info.hashes["sha256"],
                      "custom": info.custom, "downloaded_sha256": got}))
finally:
    server.shutdown()
    server.server_close()
