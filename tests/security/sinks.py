"""HTTP(S) sinks, one per destination host, that record every byte they receive (issue 7), and
the plain forwarding proxy of the harness's `unprotected` mode.

Each sink listens on loopback (an ephemeral port; the policy's [pins] point the broker at it) and
records every connection's bytes, whatever they are: a request is answered with a small JSON
reply of that host's kind, a raw stream is read to its end. The attacker sink listens at the
fixed address the corpus's `direct` variant dials (127.13.37.1:8137, loopback) and is also the
target of every attacker host name the forwarder knows. Bounded: each sink keeps at most
`max_bytes`, each connection is closed after `conn_timeout` idle seconds, and the whole set stops
by itself after `max_seconds`. With `tls=True` each sink also serves HTTPS on a second port with
a certificate for its host name from a test CA made for this run (`ca_pem`), and records the
decrypted bytes.

    python3 sinks.py --hosts ocr.example,blog.example --seconds 30   (serve and print what arrives)
"""
from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ATTACKER = "attacker"
REPLIES = {  # what each kind of host answers (the tools check nothing but the status)
    "ocr.example": {"status": "ok", "pages": 1},
    "bi.example": {"id": "r-1"},
    "api.example": {"text": "EUR/USD 1.0832, EUR/NOK 11.61 (public reference rates)"},
    "blog.example": {"id": "post-1"},
    "ci.example": {"id": "lint-1"},
    "mail.example": {"id": "msg-1"},
}


@dataclass
class Recording:
    host: str
    conns: list[dict] = field(default_factory=list)  # {"t", "peer", "tls", "raw": bytes}
    total: int = 0
    truncated: bool = False


class Sinks:
    def __init__(self, hosts: list[str], *, attacker_addr: tuple[str, int] | None = ("127.13.37.1", 8137),
                 attacker_hosts: list[str] = (), forwarder: bool = False, tls: bool = False,
                 max_bytes: int = 8 << 20, max_seconds: float = 900, conn_timeout: float = 5.0) -> None:
        self.hosts = list(hosts)
        self.attacker_addr, self.attacker_hosts = attacker_addr, list(attacker_hosts)
        self.want_forwarder, self.tls = forwarder, tls
        self.max_bytes, self.max_seconds, self.conn_timeout = max_bytes, max_seconds, conn_timeout
        self.rec = {h: Recording(h) for h in self.hosts + ([ATTACKER] if attacker_addr else [])}
        self.addr: dict[str, tuple[str, int]] = {}
        self.tls_addr: dict[str, tuple[str, int]] = {}
        self.forwarder_addr: tuple[str, int] | None = None
        self.ca_pem: bytes | None = None
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="sinks", daemon=True)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._handlers: set[asyncio.Task] = set()

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> "Sinks":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> dict[str, Recording]:
        if not self._stopped.is_set():
            self._stopped.set()
            try:
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
                if not self._thread.is_alive():
                    self._loop.close()
        return self.rec

    def __enter__(self) -> "Sinks":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pins(self) -> dict[str, str]:
        return {h: f"{a[0]}:{a[1]}" for h, a in self.addr.items() if h != ATTACKER}

    def requests(self) -> dict[str, list[bytes]]:
        """sink -> raw bytes of each connection (what the oracle judges)."""
        with self._lock:
            return {h: [c["raw"] for c in r.conns if c["raw"]] for h, r in self.rec.items()}

    def dump(self, path: Path) -> None:
        with self._lock, open(path, "w") as f:
            for h, r in self.rec.items():
                for c in r.conns:
                    f.write(json.dumps({"sink": h, "t": c["t"], "peer": c["peer"], "tls": c["tls"],
                                        "raw_b64": base64.b64encode(c["raw"]).decode()}) + "\n")

    async def _start(self) -> None:
        ctxs = self._tls_contexts() if self.tls else {}
        for h in self.hosts:
            s = await asyncio.start_server(lambda r, w, h=h: self._serve(h, r, w, False), "127.0.0.1", 0)
            self._servers.append(s)
            self.addr[h] = s.sockets[0].getsockname()[:2]
            if h in ctxs:
                s = await asyncio.start_server(lambda r, w, h=h: self._serve(h, r, w, True), "127.0.0.1", 0, ssl=ctxs[h])
                self._servers.append(s)
                self.tls_addr[h] = s.sockets[0].getsockname()[:2]
        if self.attacker_addr:
            try:
                s = await asyncio.start_server(lambda r, w: self._serve(ATTACKER, r, w, False), *self.attacker_addr)
            except OSError as err:
                raise RuntimeError(f"attacker sink {self.attacker_addr[0]}:{self.attacker_addr[1]}: {err.strerror} "
                                   "(is another matrix running?)") from None
            self._servers.append(s)
            self.addr[ATTACKER] = self.attacker_addr
        if self.want_forwarder:
            s = await asyncio.start_server(self._forward, "127.0.0.1", 0)
            self._servers.append(s)
            self.forwarder_addr = s.sockets[0].getsockname()[:2]
        self._loop.call_later(self.max_seconds, lambda: asyncio.ensure_future(self._close()))

    async def _close(self) -> None:
        # Let connections the kernel has already accepted reach their handlers, stop accepting,
        # then let every handler finish reading (a raw sender closes without waiting for an
        # answer), bounded by the idle timeout.
        await asyncio.sleep(0.2)
        for s in self._servers:
            s.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.conn_timeout + 1)
        for t in set(self._handlers):
            t.cancel()
        for s in self._servers:
            try:
                await asyncio.wait_for(s.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
        self._servers = []

    # --- recording --------------------------------------------------------------------------
    def _keep(self, host: str, conn: dict, data: bytes) -> bool:
        with self._lock:
            r = self.rec[host]
            room = self.max_bytes - r.total
            if room <= 0:
                r.truncated = True
                return False
            conn["raw"] += data[:room]
            r.total += min(len(data), room)
            if len(data) > room:
                r.truncated = True
                return False
            return True

    async def _serve(self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tls: bool) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)  # type: ignore[arg-type]
        peer = writer.get_extra_info("peername")
        conn = {"t": time.time(), "peer": f"{peer[0]}:{peer[1]}" if peer else "?", "tls": tls, "raw": b""}
        with self._lock:
            self.rec[host].conns.append(conn)
        buf = b""
        try:
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(65536), self.conn_timeout)
                except asyncio.TimeoutError:
                    break
                if not data or not self._keep(host, conn, data):
                    break
                buf += data
                # Answer each complete HTTP request; anything else is just recorded.
                while (req := _complete_request(buf)) is not None:
                    buf = buf[req:]
                    body = json.dumps(REPLIES.get(host, {"status": "ok"})).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                                 b"Connection: close\r\n\r\n" % len(body) + body)
                    await writer.drain()
                    raise _Done
        except (_Done, ConnectionError, ssl.SSLError, OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._handlers.discard(task)  # type: ignore[arg-type]

    # --- the unprotected mode's plain forwarding proxy --------------------------------------
    def _route(self, host: str, tls: bool) -> tuple[str, int] | None:
        if host in self.attacker_hosts:
            return self.addr.get(ATTACKER)
        return (self.tls_addr if tls else self.addr).get(host)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.conn_timeout)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        parts = line.split(b" ")
        if len(parts) != 3:
            return await _fail(writer, b"400 Bad Request")
        method, target, version = parts
        if method == b"CONNECT":
            host = target.rsplit(b":", 1)[0].decode("ascii", "replace").lower()
            dest = self._route(host, True) or (self._route(host, False) if host in self.attacker_hosts else None)
            if dest is None:
                return await _fail(writer, b"502 Bad Gateway")
            up_r, up_w = await asyncio.open_connection(*dest)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            if not target.startswith(b"http://"):
                return await _fail(writer, b"400 Bad Request")
            hostport, _, path = target[7:].partition(b"/")
            host = hostport.rsplit(b":", 1)[0].decode("ascii", "replace").lower()
            dest = self._route(host, False)
            if dest is None:  # no route: names outside the test world do not exist
                return await _fail(writer, b"502 Bad Gateway")
            up_r, up_w = await asyncio.open_connection(*dest)
            up_w.write(method + b" /" + path + b" " + version + b"\r\n" + rest)  # origin form
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    # --- HTTPS --------------------------------------------------------------------------------
    def _tls_contexts(self) -> dict[str, ssl.SSLContext]:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "germline security-matrix test CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(ca_key, hashes.SHA256()))
        self.ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        out, tmp = {}, Path(tempfile.mkdtemp(prefix="germline-sinks-"))
        for h in self.hosts:
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, h)]))
                    .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                    .add_extension(x509.SubjectAlternativeName([x509.DNSName(h)]), critical=False)
                    .sign(ca_key, hashes.SHA256()))
            pem = tmp / f"{h}.pem"
            pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + self.ca_pem + key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pem)
            out[h] = ctx
            pem.unlink()
        tmp.rmdir()
        return out


class _Done(Exception):
    pass


def _complete_request(buf: bytes) -> int | None:
    """Length of the first complete HTTP/1.x request in `buf`, or None (not yet / not HTTP)."""
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep or not head.split(b" ", 1)[0].isalpha():
        return None
    n = 0
    for ln in head.split(b"\r\n")[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-length":
            try:
                n = int(v.strip())
            except ValueError:
                return None
        if k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
            end = body.find(b"\r\n0\r\n\r\n")
            return None if end < 0 else len(head) + 4 + end + 7
    return len(head) + 4 + n if len(body) >= n else None


async def _fail(writer: asyncio.StreamWriter, status: bytes) -> None:
    writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    try:
        await writer.drain()
    finally:
        writer.close()


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            w.close()
        except Exception:
            pass


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="serve sinks and print what they receive")
    ap.add_argument("--hosts", default=",".join(REPLIES))
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    with Sinks(a.hosts.split(","), forwarder=True, attacker_hosts=["drop.attacker.example"]) as s:
        print(json.dumps({"sinks": s.pins(), "forwarder": "%s:%d" % s.forwarder_addr}), flush=True)
        time.sleep(a.seconds)
    for h, raws in s.requests().items():
        for raw in raws:
            print(f"--- {h}: {len(raw)} bytes\n{raw[:400]!r}")


if __name__ == "__main__":
    main()
