"""Headless Chromium (Debian's package) on `germline serve`'s status page, driven over the
DevTools protocol with the standard library only (a minimal WebSocket client below).

usage: status_browser.py BASE_URL TOKEN_FILE OUT_DIR

1. Opens BASE_URL/status without a token: the 401 login form (OUT_DIR/login.html).
2. Types the token into the form and submits it, as a person would: the browser keeps the
   HttpOnly cookie the server sets and lands on the page (OUT_DIR/first.html).
3. Touches OUT_DIR/first.done, waits (at most 180 s) for OUT_DIR/more, then, without
   navigating, waits for the page's own refresh to show more calls than in step 2
   (OUT_DIR/second.html) and takes a screenshot (OUT_DIR/status.png).
Prints one JSON object: what the browser saw besides the DOM (status codes, whether scripts
can read the cookie, whether the nonce'd style applied, console messages)."""
import base64, json, os, shutil, socket, struct, subprocess, sys, tempfile, time
import urllib.request


class WebSocket:
    """Just enough of RFC 6455 for DevTools: text frames, client masking, no extensions."""

    def __init__(self, url):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(1)
            if not chunk:
                raise SystemExit("DevTools closed the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise SystemExit(f"DevTools refused the WebSocket: {head!r}")
        self.n = 0
        self.events = []

    def _recv_exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise SystemExit("DevTools closed the WebSocket")
            b += chunk
        return b

    def _frame(self):
        data = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            data += self._recv_exact(n)
            if b0 & 0x80:
                return b0 & 0x0F, data

    def send(self, obj):
        payload = json.dumps(obj).encode()
        mask = os.urandom(4)
        head = bytes([0x81])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def call(self, method, **params):
        self.n += 1
        self.send({"id": self.n, "method": method, "params": params})
        while True:
            op, data = self._frame()
            if op != 1:
                continue
            msg = json.loads(data)
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise SystemExit(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)


def main(base, token_file, out):
    token = open(token_file).read().strip()
    profile = tempfile.mkdtemp(prefix="germline-chromium-")
    chrome = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-allow-origins=*", "--window-size=1400,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t.get("type") == "page")
        ws = WebSocket(page["webSocketDebuggerUrl"])
        ws.call("Page.enable")
        ws.call("Network.enable")
        ws.call("Runtime.enable")
        ws.call("Log.enable")

        def evaluate(expr):
            r = ws.call("Runtime.evaluate", expression=expr, returnByValue=True)
            return r["result"].get("value")

        def wait_load(url_part, since):
            for _ in range(300):
                for e in ws.events[since:]:
                    if e.get("method") == "Page.loadEventFired":
                        return
                time.sleep(0.1)
                ws.call("Runtime.evaluate", expression="1")
            raise SystemExit(f"no load event for {url_part}")

        def statuses():
            return [(e["params"]["response"]["url"], e["params"]["response"]["status"])
                    for e in ws.events if e.get("method") == "Network.responseReceived"]

        def dom():
            return evaluate("document.documentElement.outerHTML")

        def calls_rows():
            return evaluate("document.querySelectorAll('#calls tbody tr td:first-child').length "
                            "- document.querySelectorAll('#calls td.none').length")

        mark = len(ws.events)
        ws.call("Page.navigate", url=base + "/status")
        wait_load("/status", mark)
        open(os.path.join(out, "login.html"), "w").write(dom())
        mark = len(ws.events)
        # As a person: the token goes into the form's password field and is posted.
        evaluate("document.querySelector('input[name=token]').value = " + json.dumps(token) +
                 "; document.querySelector('form').submit(); true")
        wait_load("/status after login", mark)
        time.sleep(0.3)
        first = dom()
        open(os.path.join(out, "first.html"), "w").write(first)
        seen = {
            "first_calls": calls_rows(),
            "cookie_visible_to_script": evaluate("document.cookie"),
            "th_font_weight": evaluate("getComputedStyle(document.querySelector('th')).fontWeight"),
            "location": evaluate("location.href"),
        }
        open(os.path.join(out, "first.done"), "w").close()
        for _ in range(1800):
            if os.path.exists(os.path.join(out, "more")):
                break
            time.sleep(0.1)
        else:
            raise SystemExit("timed out waiting for OUT_DIR/more")
        # The page reloads itself (meta refresh); the test never navigates again.
        t0 = time.time()
        while time.time() - t0 < 30:
            try:
                n = calls_rows()
            except SystemExit:
                n = None  # the page was between documents
            if n is not None and n > seen["first_calls"]:
                break
            time.sleep(0.5)
        time.sleep(0.5)
        seen["second_calls"] = calls_rows()
        seen["refresh_wait_s"] = round(time.time() - t0, 1)
        open(os.path.join(out, "second.html"), "w").write(dom())
        shot = ws.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        open(os.path.join(out, "status.png"), "wb").write(base64.b64decode(shot["data"]))
        seen["statuses"] = statuses()
        seen["console"] = [e["params"]["entry"]["text"] for e in ws.events
                           if e.get("method") == "Log.entryAdded"] + [
            " ".join(str(a.get("value", "")) for a in e["params"].get("args", []))
            for e in ws.events if e.get("method") == "Runtime.consoleAPICalled"]
        print(json.dumps(seen), flush=True)
    finally:
        chrome.terminate()
        try:
            chrome.wait(10)
        except subprocess.TimeoutExpired:
            chrome.kill()
        shutil.rmtree(profile, ignore_errors=True)


main(sys.argv[1], sys.argv[2], sys.argv[3])
