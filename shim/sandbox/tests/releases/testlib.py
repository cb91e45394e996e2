# Tools shared by the test releases: each probes one channel and reports what it found.
import ctypes
import errno
import json
import os
import socket
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

INIT = {}
WORKERS = []
KEEP = []
libc = ctypes.CDLL(None, use_errno=True)


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else type(e).__name__


def attempt(fn):
    try:
        r = fn()
        return "ok" if r is None else r
    except Exception as e:  # the probe reports, the test judges
        return err(e)


def shm_get(key, create):
    flags = 0o1000 | 0o666 if create else 0  # IPC_CREAT
    r = libc.shmget(key, 4096, flags)
    if r < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    return "ok"


def plant(secret):
    out = {}
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out["abstract"] = attempt(lambda: (a.bind("\0germline-plant"), a.listen(1), KEEP.append(a))[0])
    t = socket.socket()
    out["tcp"] = attempt(lambda: (t.bind(("127.0.0.1", 47811)), t.listen(1), KEEP.append(t))[0])
    out["sysv"] = attempt(lambda: shm_get(0x6E7E, True))
    for path in ["/tmp/plant", "/dev/shm/plant", "/run/scratch/plant", "/app/plant", "/run/items/plant", "/plant"]:
        def w(path=path):
            with open(path, "w") as f:
                f.write(secret)
        out[path] = attempt(w)
    out["hostname"] = attempt(lambda: socket.sethostname(secret))
    out["keyring"] = attempt(lambda: _add_key(secret))
    return out


def _add_key(secret):
    r = libc.syscall(248, b"user", b"germline", secret.encode(), len(secret), -3)  # add_key, session
    if r < 0:
        raise OSError(ctypes.get_errno(), "add_key")


def probe(secret, other_pids):
    found = {}
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    found["abstract"] = attempt(lambda: a.connect("\0germline-plant"))
    found["tcp"] = attempt(lambda: socket.create_connection(("127.0.0.1", 47811), timeout=1) and None)
    found["sysv"] = attempt(lambda: shm_get(0x6E7E, False))
    for path in ["/tmp/plant", "/dev/shm/plant", "/run/scratch/plant", "/app/plant", "/run/items/plant", "/plant"]:
        found[path] = attempt(lambda path=path: open(path).read())
    found["hostname"] = socket.gethostname()
    found["proc"] = attempt(lambda: sorted(p for p in os.listdir("/proc") if p.isdigit()))
    found["run_proc"] = attempt(lambda: sorted(p for p in os.listdir("/run/proc") if p.isdigit()))
    import threading
    own = {os.getpid()} | {t.native_id for t in threading.enumerate()}
    visible = []
    for pid in sorted(set(range(1, 200)) | set(other_pids)):
        if pid in own:
            continue
        try:
            os.kill(pid, 0)
            visible.append(pid)
        except OSError:
            pass
    found["signalable"] = visible
    found["kill_all"] = attempt(lambda: os.kill(-1, 0))
    mem = []
    for pid in other_pids:
        mem.append(attempt(lambda pid=pid: open(f"/proc/{pid}/mem", "rb").read(1)))
        local = (ctypes.c_char * 8)()
        iov = (ctypes.c_void_p * 2)(ctypes.cast(local, ctypes.c_void_p), 8)
        riov = (ctypes.c_void_p * 2)(0x400000, 8)
        r = libc.process_vm_readv(pid, iov, 1, riov, 1, 0)
        mem.append("ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
    found["memory"] = mem
    found["secret_seen"] = secret in json.dumps(found)
    return found


# Socket families by number (Python's socket module lacks some of them on some builds):
# the ones issue 25 names first, then the rest up to AF_MAX.
FAMILIES = {"AF_VSOCK": 40, "AF_NETLINK": 16, "AF_PACKET": 17, "AF_ALG": 38, "AF_BLUETOOTH": 31,
            "AF_KEY": 15, "AF_XDP": 44, "AF_CAN": 29, "AF_TIPC": 30, "AF_RDS": 21, "AF_SMC": 43,
            "AF_KCM": 41, "AF_QIPCRTR": 42, "AF_MCTP": 45, "AF_PPPOX": 24, "AF_LLC": 26,
            "AF_X25": 9, "AF_AX25": 3, "AF_APPLETALK": 5, "AF_IPX": 4, "AF_RXRPC": 33,
            "AF_PHONET": 35, "AF_IEEE802154": 36, "AF_CAIF": 37, "AF_NFC": 39, "AF_IB": 27,
            "AF_MPLS": 28, "AF_ISDN": 34, "AF_UNSPEC": 0}
FAMILIES.update({f"AF_{n}": n for n in range(46) if n not in FAMILIES.values() and n not in (1, 2, 10)})
SYS_SOCKET = {"x86_64": 41, "aarch64": 198}
SYS_SOCKETPAIR = {"x86_64": 53, "aarch64": 199}


def open_socket(family, kind, pair=False):
    """"ok" if the socket (or pair) could be created, else the errno's name."""
    def make():
        for s in (socket.socketpair(family, kind) if pair else [socket.socket(family, kind, 0)]):
            s.close()
    return attempt(make)


def _raw(call, arg0, kind):
    """A raw system call with a 64-bit first argument (the upper half is what libc never sets)."""
    import platform
    table = SYS_SOCKETPAIR if call == "socketpair" else SYS_SOCKET
    nr = table[platform.machine()]
    pair = (ctypes.c_int * 2)()
    r = libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(arg0), ctypes.c_long(kind), ctypes.c_long(0), pair)
    if r < 0:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    for fd in ([pair[0], pair[1]] if call == "socketpair" else [r]):
        os.close(fd)
    return "ok"


def socket_probe():
    kinds = [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW]
    out = {"refused": {}, "allowed": {}, "raw": {}}
    for name, family in FAMILIES.items():
        # "ok" if any type opens; else every distinct errno.
        got = [open_socket(family, k) for k in kinds]
        out["refused"][name] = "ok" if "ok" in got else "/".join(sorted(set(got)))
    for name in ["AF_VSOCK", "AF_NETLINK"]:
        out["refused"][name + " pair"] = open_socket(FAMILIES[name], socket.SOCK_STREAM if name == "AF_VSOCK" else socket.SOCK_RAW, pair=True)
    for name, family in [("AF_UNIX", socket.AF_UNIX), ("AF_INET", socket.AF_INET), ("AF_INET6", socket.AF_INET6)]:
        for kname, k in [("stream", socket.SOCK_STREAM), ("dgram", socket.SOCK_DGRAM)]:
            out["allowed"][f"{name} {kname}"] = open_socket(family, k)
    out["allowed"]["AF_UNIX pair"] = open_socket(socket.AF_UNIX, socket.SOCK_STREAM, pair=True)
    # glibc's getaddrinfo probes interfaces with a netlink socket for AI_ADDRCONFIG and must
    # treat a refused one as "unknown", not fail.
    out["allowed"]["getaddrinfo"] = attempt(lambda: socket.getaddrinfo(
        "127.0.0.1", 80, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG) and None)
    for label, arg0 in [("AF_UNIX+hi", (1 << 32) | 1), ("AF_INET+hi", (1 << 63) | 2),
                        ("AF_INET6 all-ones hi", (0xFFFFFFFF << 32) | 10), ("AF_INET", 2)]:
        out["raw"][label] = _raw("socket", arg0, socket.SOCK_DGRAM)
    out["raw"]["socketpair AF_UNIX+hi"] = _raw("socketpair", (1 << 40) | 1, socket.SOCK_STREAM)
    return out


# System calls that would reach past the copy by other means than a socket (x86_64 numbers):
# each answered EPERM by the germline's seccomp layer, before the kernel looks at its arguments.
KERNEL_CALLS = {"io_uring_setup": 425, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
                "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                "pidfd_getfd": 438, "keyctl": 250, "add_key": 248, "request_key": 249}


def kernel_calls():
    """Each call with harmless arguments (a NULL pointer where one is needed): "ok" if the kernel
    ran it, else the errno's name."""
    import platform
    if platform.machine() != "x86_64":
        return {"skipped": platform.machine()}
    out = {}
    for name, nr in KERNEL_CALLS.items():
        r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0),
                         ctypes.c_long(0), ctypes.c_long(0))
        out[name] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        if r > 2 and name in ("io_uring_setup", "bpf", "perf_event_open", "userfaultfd", "pidfd_getfd"):
            os.close(r)  # a descriptor, had the call been let through
    return out


def wire():
    """The descriptor of the copy's channel to the shim: the germline bootstrap serves the
    copy's stdio on its socket (COPY_WIRE); elsewhere the SDK serves stdout from a private
    duplicate and points fd 1 at stderr, so find its claim."""
    main = sys.modules.get("__main__")
    w = getattr(main, "COPY_WIRE", None)
    if w is not None:
        return w.sock.fileno()
    import mcp.server.stdio as stdio
    claim = stdio._claims.get(1)
    return claim.private_fd if claim and claim.private_fd is not None else 1


COUNT = [0]


def server(name="test"):
    s = MCPServer(name)

    @s.tool()
    def echo(text: str) -> str:
        return text

    @s.tool()
    def pids() -> str:
        # What the tool can tell of its place: its PID and its parent's, and the processes of
        # its private procfs.
        return json.dumps({"pid": os.getpid(), "ppid": os.getppid(),
                           "run_proc": attempt(lambda: sorted(p for p in os.listdir("/run/proc") if p.isdigit()))})

    @s.tool()
    def sockets() -> str:
        return json.dumps(socket_probe())

    @s.tool()
    def kernel() -> str:
        return json.dumps(kernel_calls())

    @s.tool()
    def init_report() -> str:
        return json.dumps(INIT)

    @s.tool()
    def client_caps(ctx: Context) -> str:
        # The client capabilities this copy's `initialize` announced.
        caps = ctx.session.client_capabilities
        return json.dumps(caps.model_dump(exclude_none=True) if caps is not None else None)

    @s.tool()
    def worker() -> str:
        # The thread a synchronous tool runs on (MCPServer runs them on a worker thread): the
        # threads of this process's earlier calls, and this call's.
        import threading
        now = threading.get_native_id()
        seen = list(WORKERS)
        WORKERS.append(now)
        return json.dumps({"seen": seen, "now": now})

    @s.tool()
    def count() -> str:
        # Calls this process (and the germline it was forked from) has served.
        COUNT[0] += 1
        return str(COUNT[0])

    @s.tool()
    def plant_all(secret: str) -> str:
        return json.dumps(plant(secret))

    @s.tool()
    def probe_all(secret: str, other_pids: list[int]) -> str:
        return json.dumps(probe(secret, other_pids))

    @s.tool()
    def items() -> str:
        fds = json.loads(os.environ.get("GERMLINE_ITEM_FDS", "{}"))
        out = {"fds": {}, "files": {}}
        for name, fd in fds.items():
            out["fds"][name] = attempt(lambda fd=fd: os.pread(fd, 1 << 20, 0).decode(errors="replace"))
        for name in attempt(lambda: sorted(os.listdir("/run/items"))):
            out["files"][name] = attempt(lambda name=name: open(f"/run/items/{name}").read())
        return json.dumps(out)

    @s.tool()
    def stash(text: str) -> str:
        # Writes into whatever channel the release kept from its initialisation.
        return INIT["stash"](text)

    @s.tool()
    def peek() -> str:
        return INIT["peek"]()

    @s.tool()
    def sleep_forever() -> str:
        time.sleep(3600)
        return "woke"

    @s.tool()
    def chatter() -> str:
        while True:
            os.write(wire(), b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\n')
            time.sleep(0.001)

    @s.tool()
    def busy_child() -> str:
        pid = os.fork()
        if pid == 0:
            while True:
                pass
        os.waitpid(pid, 0)
        return "child ended"

    @s.tool()
    def leave_child() -> str:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(3600)
            os._exit(0)
        return f"left {pid}"

    @s.tool()
    def hog(mb: int) -> str:
        blocks = []
        for _ in range(mb):
            blocks.append(bytearray(1 << 20))
        return f"allocated {len(blocks)} MiB"

    @s.tool()
    def fetch(url: str, client: str) -> str:
        # urllib: proxy and CA bundle from the environment (HTTPS_PROXY, SSL_CERT_FILE).
        # httpx: httpx2 with the proxy given and trust_env off, so it reads OpenSSL's default
        # bundle path (Debian's /etc/ssl/certs/ca-certificates.crt), never the variables.
        try:
            if client == "urllib":
                import urllib.request
                with urllib.request.urlopen(url, timeout=10) as r:
                    return json.dumps({"status": r.status, "body": r.read().decode()})
            import httpx2
            with httpx2.Client(proxy=os.environ.get("HTTPS_PROXY"), trust_env=False, timeout=10) as c:
                r = c.get(url)
                return json.dumps({"status": r.status_code, "body": r.text})
        except Exception as e:  # the test judges
            return json.dumps({"error": f"{type(e).__name__}: {e}"})

    @s.tool()
    def read_files(paths: list[str]) -> str:
        return json.dumps({p: attempt(lambda p=p: open(p).read()) for p in paths})

    @s.tool()
    def list_dirs(paths: list[str]) -> str:
        return json.dumps({p: attempt(lambda p=p: sorted(os.listdir(p))) for p in paths})

    @s.tool()
    def crash() -> str:
        os._exit(3)

    @s.tool()
    def garbage() -> str:
        os.write(wire(), b"this is not json\n")
        time.sleep(3600)
        return "no"

    return s


def run(s=None):
    (s or server()).run()
