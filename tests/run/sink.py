"""An HTTP sink for germline's tests and demo: records every request it receives (method, path,
headers, body) as one JSON line, answers 200 with a short fixed text, and stops by itself.

    python3 sink.py --port PORT --log FILE [--seconds 600] [--reply TEXT] [--dir DIR] [--bind IP]
                    [--redirect PATH=URL ...] [--delay SECONDS]

With --dir, GET requests are served from the files in DIR (404 if absent), as a web server.
With --redirect PATH=URL (repeatable), a request for PATH is answered 302 with Location URL.
With --delay SECONDS, every answer is sent that long after the request was recorded (a slow
service: a tool call that waits for it runs that long). If the client closes the connection
meanwhile, that is recorded as {"dropped": true, "path", "monotonic"} (CLOCK_MONOTONIC, seconds)
and nothing is answered.

Prints `ready PORT` on stdout once listening (PORT 0 picks a free one)."""
import argparse
import base64
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--reply", default="ocr ok")
    ap.add_argument("--dir")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--redirect", action="append", default=[])
    ap.add_argument("--delay", type=float, default=0)
    a = ap.parse_args()
    redirects = dict(r.split("=", 1) for r in a.redirect)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _record(self):
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            rec = {"method": self.command, "path": self.path, "host": self.headers.get("host"), "headers": dict(self.headers),
                   "body_b64": base64.b64encode(body).decode(), "body": body.decode("utf-8", "replace")}
            with lock, open(a.log, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if a.delay:
                end = time.monotonic() + a.delay
                while time.monotonic() < end:
                    try:
                        gone = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                    except BlockingIOError:
                        gone = False
                    except OSError:
                        gone = True
                    if gone:
                        with lock, open(a.log, "a") as f:
                            f.write(json.dumps({"dropped": True, "path": self.path, "monotonic": time.monotonic()}) + "\n")
                        self.close_connection = True
                        return
                    time.sleep(0.002)
            status, ctype = 200, "text/plain"
            out = f"{a.reply} ({len(body)} bytes)".encode()
            location = redirects.get(self.path.split("?")[0])
            if location:
                self.send_response(302)
                self.send_header("location", location)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            if a.dir and self.command == "GET":
                name = os.path.basename(self.path.split("?")[0]) or "index.html"
                path = os.path.join(a.dir, name)
                if os.path.isfile(path):
                    with open(path, "rb") as f:
                        out = f.read()
                    ctype = "text/html" if name.endswith(".html") else "text/plain"
                else:
                    status, out = 404, b"not found\n"
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PUT = _record

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer((a.bind, a.port), Handler)
    threading.Timer(a.seconds, srv.shutdown).start()
    print(f"ready {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
