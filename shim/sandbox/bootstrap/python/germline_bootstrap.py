# germline bootstrap for Python MCP servers built on the official `mcp` SDK (issue 4, item 2).
#
# Run by the shim as `python3 -I -B -c <this file> <config json>` inside the germline, after the
# shim has applied Landlock and seccomp. It is untrusted like the release: the shim checks from
# outside everything it claims to do. Protocol (docs/sandbox.md):
#   control socket fd 3 (SOCK_SEQPACKET, one JSON object per packet)
#     germline -> shim  {"op":"ready","warm":bool} | {"op":"error","reason":str}
#     shim -> germline  {"op":"fork", "seccomp":hex, "landlock":{...}, "pidns":bool, "reaper":bool}
#                        + SCM_RIGHTS [copy socket]
#     germline -> shim  {"op":"forked"}
#   copy socket (SOCK_STREAM, newline-delimited JSON)
#     shim -> copy      {"op":"go"}      (with "reaper": the copy is in its cgroup; it forks the tool)
#     copy -> shim      {"op":"ready"}
#     shim -> copy      {"op":"prewarm"}   (optional, pool copies; no answer)
#   then MCP JSON-RPC on the same socket (the server's stdio), into which the shim puts, before
#   the call's tools/call, one control line (it starts with `{"op":`, no JSON-RPC line does):
#     shim -> copy      {"op":"data","items":[{"name":str}...],"twin"?:{"time_ns","seed"}}
#                       + SCM_RIGHTS [memfd per item]
#   The copy's `initialize` may come before the data (it is public): a pool copy answers it
#   while it waits for its call, a fresh one while the shim mounts its items.
import ctypes
import gc
import json
import os
import signal
import socket
import sys
import threading
import time

CONFIG = json.loads(sys.argv[1])
CTL = socket.socket(fileno=3)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
PR_CAPBSET_DROP = 24
PR_CAPBSET_READ = 23
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SYS = {"x86_64": {"capset": 126}, "aarch64": {"capset": 91}}[os.uname().machine]
FILE_RIGHTS = 1 | 2 | 4 | (1 << 14) | (1 << 15)
SYS_landlock_create_ruleset, SYS_landlock_add_rule, SYS_landlock_restrict_self = 444, 445, 446

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CAP_LAST = None


def check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def send_ctl(obj):
    CTL.send(json.dumps(obj).encode())


def fail(reason):
    try:
        send_ctl({"op": "error", "reason": reason[-4000:]})
    finally:
        os._exit(1)


# --- 0. which MCP SDK the release is built on (docs/sandbox.md, "SDK generations") -----------

class Unsupported(Exception):
    """A release the bootstrap cannot run: the reason and what to do, sent as the start error."""


class SDK:
    """What the bootstrap needs of the release's Python MCP SDK, found by `probe_sdk`.

    Every generation it runs ends in the official SDK's `mcp.server.lowlevel.Server.run` over
    `mcp.server.stdio.stdio_server` (the standalone `fastmcp` package depends on `mcp` and calls
    both from `run_stdio_async`), so the intercepts are the same; what differs is where the
    message types live (`mcp_types` in 2.x, `mcp.types` in 1.x) and whether the streams carry
    `mcp.shared.message.SessionMessage` (1.7 on) or bare `JSONRPCMessage`s (1.2 to 1.6)."""

    def __init__(self, mcp_version, fastmcp_version):
        self.mcp = mcp_version
        self.fastmcp = fastmcp_version
        self.types = None
        self.adapter = None
        self.session_message = None

    def describe(self):
        s = f"mcp {self.mcp}"
        return s + (f" (via fastmcp {self.fastmcp})" if self.fastmcp else "")

    def load(self):
        # Called after the release's own imports (its sys.path is in place), before the warm step.
        if self.types is not None:
            return
        if _major_minor(self.mcp) >= (2, 0):
            import mcp_types as types
        else:
            import mcp.types as types
        self.types = types
        try:
            from mcp.shared.message import SessionMessage
            self.session_message = SessionMessage
        except ImportError:
            self.session_message = None

    def message(self, obj):
        t = self.types.JSONRPCMessage
        if hasattr(t, "model_validate"):  # 1.x: a RootModel
            m = t.model_validate(obj)
        else:  # mcp_types 2.x: a plain union, validated through pydantic's TypeAdapter
            if self.adapter is None:
                from pydantic import TypeAdapter
                self.adapter = TypeAdapter(t)
            m = self.adapter.validate_python(obj)
        return self.session_message(m) if self.session_message is not None else m

    @staticmethod
    def unwrap(got):
        got = getattr(got, "message", got)  # a SessionMessage's JSON-RPC message
        return getattr(got, "root", got)


SUPPORTED = "mcp >= 1.2 (1.x and 2.x) and the standalone fastmcp 2.x to 4.x, which runs on it"


def _major_minor(version):
    parts = []
    for p in str(version).split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit()) if not p.isdigit() else p
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts)


def probe_sdk():
    """The release's SDK from its installed distributions' metadata (`importlib.metadata`, read
    from the rootfs's `*.dist-info`, nothing imported), or `Unsupported` with what to do."""
    from importlib import metadata

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    mcp_v, fastmcp_v = version("mcp"), version("fastmcp")
    if mcp_v is None:
        what = f"fastmcp {fastmcp_v} without the mcp package" if fastmcp_v else "no mcp package installed"
        raise Unsupported(
            f"unsupported SDK: {what} (germline's Python bootstrap runs servers on {SUPPORTED}); "
            "pack the release with its dependencies (germline release pack --from pypi:NAME installs them)")
    if _major_minor(mcp_v) < (1, 2) or _major_minor(mcp_v) >= (3, 0):
        raise Unsupported(
            f"unsupported SDK: mcp {mcp_v} (germline's Python bootstrap runs servers on {SUPPORTED}); "
            "pack the release with a supported mcp (e.g. --with 'mcp>=1.2,<3')")
    if fastmcp_v is not None and not ((2, 0) <= _major_minor(fastmcp_v) < (5, 0)):
        raise Unsupported(
            f"unsupported SDK: fastmcp {fastmcp_v} on mcp {mcp_v} (germline's Python bootstrap "
            f"runs servers on {SUPPORTED}); pack the release with a supported fastmcp "
            "(e.g. --with 'fastmcp>=2,<5')")
    return SDK(mcp_v, fastmcp_v)


SDK_IN_USE = None


# --- 1. intercept the SDK's stdio transport so that initialisation stops at the fork point ----

class _ForkPoint(BaseException):
    pass


CAPTURED = {}
ORIGINAL = {}


def install_intercepts():
    import mcp.server.stdio as stdio
    import mcp.server.lowlevel.server as lowlevel
    from contextlib import asynccontextmanager

    ORIGINAL["stdio_server"] = stdio.stdio_server
    ORIGINAL["run"] = lowlevel.Server.run

    @asynccontextmanager
    async def fake_stdio_server(*args, **kwargs):
        # The germline never touches its standard streams: hand out streams that nothing reads.
        import anyio
        send, recv = anyio.create_memory_object_stream(0)
        send2, recv2 = anyio.create_memory_object_stream(0)
        yield recv, send2

    async def captured_run(self, read_stream, write_stream, initialization_options, *a, **kw):
        # The server object is built and its handlers registered: this is the fork point.
        CAPTURED["server"] = self
        CAPTURED["options"] = initialization_options
        CAPTURED["kwargs"] = kw
        raise _ForkPoint()

    lowlevel.Server.run = captured_run
    for mod in list(sys.modules.values()):
        if getattr(mod, "stdio_server", None) is ORIGINAL["stdio_server"]:
            try:
                setattr(mod, "stdio_server", fake_stdio_server)
            except (AttributeError, TypeError):
                pass
    stdio.stdio_server = fake_stdio_server


def run_release_init():
    entry = CONFIG["entry"]
    sys.argv = [entry[0]] + entry[1:]
    target = entry[0]
    try:
        if target == "-m":
            import runpy
            sys.argv = [entry[1]] + entry[2:]
            runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
        else:
            import importlib
            mod_name, _, func = target.partition(":")
            mod = importlib.import_module(mod_name)
            obj = mod
            for part in (func or "main").split("."):
                obj = getattr(obj, part)
            obj()
    except _ForkPoint:
        return
    except SystemExit as e:
        if "server" in CAPTURED:
            return
        fail(f"the release exited during initialisation: {e.code!r}")
    if "server" not in CAPTURED:
        fail(f"the release returned without starting an MCP stdio server ({SDK_IN_USE.describe()}: "
             "the bootstrap stops a server at mcp.server.lowlevel.Server.run over "
             "mcp.server.stdio.stdio_server; a server with a transport of its own is not supported)")


def settle():
    # Wait for worker threads of the SDK to finish, then drop unreachable objects (and their
    # descriptors) so that the outside checks G1-G3 can pass.
    for t in threading.enumerate():
        if t is not threading.current_thread():
            t.join(timeout=2.0)
    gc.collect()


# Warm calls of the germline's warming session that failed (an error answer, a tool error, a
# timeout), as "'tool': why": sent to the shim in `ready` (the germline's own stderr is
# /dev/null), which says each on its stderr and counts them in `germline status`.
WARM_FAILED = []


def _warm_failure(got):
    # Why a warm call's answer is a failure, or None: a JSON-RPC error, or a result the tool
    # marked `isError` (an exception in a FastMCP tool, such as git's "dubious ownership").
    error = getattr(got, "error", None)
    if error is not None:
        return str(getattr(error, "message", error))
    result = getattr(got, "result", None)
    if isinstance(result, dict) and result.get("isError"):
        texts = [c.get("text", "") for c in result.get("content") or () if isinstance(c, dict)]
        return " ".join(t for t in texts if t) or "the tool reported an error"
    return None


def _report_warm_failure(tool, why, report):
    if report:
        WARM_FAILED.append(f"{tool!r}: " + " ".join(str(why).split())[:300])


async def warm_session(warm_calls=(), report=True):
    # One synthetic session on public data: initialize, tools/list and the manifest's warm
    # calls (docs/sandbox.md). A warm call that fails is skipped, as an optimisation that did
    # not apply; with `report` (the germline's own session; a pool copy reruns the same calls
    # on the same public data) it is listed for the shim. False if the session itself failed.
    import anyio
    sdk = SDK_IN_USE
    sdk.load()

    async def session():
        c2s_send, c2s_recv = anyio.create_memory_object_stream(16)
        s2c_send, s2c_recv = anyio.create_memory_object_stream(16)
        server = CAPTURED["server"]
        msg = sdk.message

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: ORIGINAL["run"](server, c2s_recv, s2c_send, CAPTURED["options"]))
            await c2s_send.send(msg({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "germline-warm", "version": "0"}}}))
            await s2c_recv.receive()
            await c2s_send.send(msg({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            await c2s_send.send(msg({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            await s2c_recv.receive()
            # The manifest's warm calls (public arguments, signed): the tool's own code paths
            # and the SDK's first-call work run here once instead of in every copy. Each is
            # bounded; one that fails or hangs leaves the rest of the warming as it was.
            for i, call in enumerate(warm_calls):
                want = 3 + i
                try:
                    with anyio.fail_after(10):
                        await c2s_send.send(msg({"jsonrpc": "2.0", "id": want, "method": "tools/call",
                                                 "params": {"name": call["tool"], "arguments": call.get("arguments", {})}}))
                        for _ in range(1000):
                            got = SDK.unwrap(await s2c_recv.receive())
                            if getattr(got, "id", None) == want:
                                break
                except Exception as e:
                    # Bounded: one that hangs ends the warm calls (its answer could still come).
                    why = "no answer within 10 s" if isinstance(e, TimeoutError) else repr(e)
                    _report_warm_failure(call.get("tool"), why, report)
                    break
                why = _warm_failure(got)
                if why is not None:
                    _report_warm_failure(call.get("tool"), why, report)
            tg.cancel_scope.cancel()

    try:
        await session()
        return True
    except Exception:
        return False


def warm(warm_calls=(), report=True):
    # The germline's warming: its own event loop, ended (with its worker threads) before the
    # fork point.
    import anyio
    try:
        return anyio.run(warm_session, warm_calls, report)
    except Exception:
        return False


# --- 2. copies ----------------------------------------------------------------------------------

def _last_cap():
    # The highest capability the kernel knows (no /proc here): probe the bounding set.
    last = 40
    while libc.prctl(PR_CAPBSET_READ, last + 1, 0, 0, 0) >= 0:
        last += 1
    return last


def drop_capabilities():
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)(0, 0, 0, 0, 0, 0)
    check(libc.syscall(SYS["capset"], header, data), "capset")


def landlock_layer(cfg):
    abi = libc.syscall(SYS_landlock_create_ruleset, None, 0, 1)
    if abi < 1:
        return
    attr = (ctypes.c_uint64 * 3)(cfg["fs"], cfg["net"] if abi >= 4 else 0, cfg["scoped"] if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = check(libc.syscall(SYS_landlock_create_ruleset, attr, size, 0), "landlock_create_ruleset")
    for path, access in cfg["rules"]:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(path):
            access &= FILE_RIGHTS  # a rule on a file may carry only file rights
        access &= cfg["fs"]
        rule = (ctypes.c_uint8 * 12)()
        ctypes.memmove(rule, ctypes.c_uint64(access).value.to_bytes(8, "little") + pfd.to_bytes(4, "little", signed=True), 12)
        check(libc.syscall(SYS_landlock_add_rule, fd, 1, rule, 0), f"landlock_add_rule {path}")
        os.close(pfd)
    if abi >= 4:
        for port in cfg.get("ports", []):
            # struct landlock_net_port_attr: allowed_access (CONNECT_TCP), port; packed.
            rule = (ctypes.c_uint8 * 16)()
            ctypes.memmove(rule, (2).to_bytes(8, "little") + int(port).to_bytes(8, "little"), 16)
            check(libc.syscall(SYS_landlock_add_rule, fd, 2, rule, 0), f"landlock_add_rule port {port}")
    check(libc.syscall(SYS_landlock_restrict_self, fd, 0), "landlock_restrict_self")
    os.close(fd)


def install_seccomp(program_hex):
    prog = bytes.fromhex(program_hex)
    buf = ctypes.create_string_buffer(prog, len(prog))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


COPY_WIRE = None
_PENDING = [b""]  # bytes after the last line read (the shim may send two lines at once)


def recv_line(sock, fds_out):
    data = _PENDING[0]
    while b"\n" not in data:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 65536, 64)
        if not msg:
            os._exit(3)
        fds_out.extend(fds)
        data += msg
    line, _, _PENDING[0] = data.partition(b"\n")
    return json.loads(line)


def reaper(tool):
    # PID 1 of the copy's namespace: no descriptor but 0-2 (the shim sees the copy socket close
    # when the tool dies), default signal dispositions (PID 1 then gets no signal from inside its
    # namespace), reap orphans, and exit with the tool, which ends the namespace.
    try:
        gc.disable()
        os.closerange(3, 1 << 20)
        for sig in signal.valid_signals():
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == tool:
                os._exit(0 if status == 0 else 1)
    finally:
        os._exit(1)


def copy_main(sock_fd, cmd):
    # PID 1 of a fresh PID namespace. Fresh net, IPC, UTS and mount namespaces; no capabilities.
    # `t`: CLOCK_MONOTONIC at each step, for the shim's time breakdown only (it trusts none).
    t = [time.monotonic_ns()]
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    CTL.detach()
    os.close(3)
    check(libc.unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS), "unshare")
    name = b"copy"
    check(libc.sethostname(name, len(name)), "sethostname")
    t.append(time.monotonic_ns())
    drop_capabilities()
    t.append(time.monotonic_ns())
    landlock_layer(cmd["landlock"])
    t.append(time.monotonic_ns())
    install_seccomp(cmd["seccomp"])
    t.append(time.monotonic_ns())
    sock = socket.socket(fileno=sock_fd)
    fds = []
    if cmd.get("reaper"):
        # The tool runs as PID 2 under a reaper (docs/sandbox.md): fork once the shim says the
        # copy is in its own cgroup, so that the tool is born there.
        go = recv_line(sock, fds)
        if go.get("op") != "go" or fds:
            os._exit(5)
        # The tool says ready only once the reaper has closed its descriptors (the pipe's
        # write end among them), so the shim's checks never see the reaper with the socket.
        closed_r, closed_w = os.pipe()
        tool = os.fork()
        if tool != 0:
            os.close(sock.detach())
            reaper(tool)
        os.close(closed_w)
        while os.read(closed_r, 1):
            pass
        os.close(closed_r)
    sock.sendall(json.dumps({"op": "ready", "t": t}).encode() + b"\n")
    prewarm = _peek_line(sock, fds).startswith(b'{"op":"prewarm"')
    if prewarm:
        _PENDING[0] = _PENDING[0].partition(b"\n")[2]
    import anyio

    # The copy socket is the server's stdio, read and written on the event loop itself (the
    # SDK's own stdio transport hands every line to a worker thread and back).
    wire = _CopyWire(sock, _PENDING[0], fds)
    global COPY_WIRE
    COPY_WIRE = wire  # where a test release playing a Trojan finds the raw channel

    async def serve():
        if prewarm:
            # A checked pool copy, holding no data: the synthetic session once more while it
            # waits for its call, so the pages it touches are copied now (copy-on-write), off
            # the call's path. Only the warm calls the publisher marked `in_pool` (running them
            # again changes no later answer): a pool copy must answer a call as a freshly
            # forked one would (probe re-runs compare them), and the others may change tool
            # state. On the event loop that serves the call, before the wire is read: anyio
            # keeps a loop's idle worker threads, so a server that runs synchronous tools on
            # one (the SDK's MCPServer does) starts the call on the thread its warming made
            # instead of starting a new thread on the call's path.
            await warm_session([c for c in (CONFIG.get("warm_calls") or ()) if c.get("in_pool") is True],
                               report=False)
            twin_index()  # the session may have imported modules that bound a clock
            twin_touch()  # the pages the call's twin_install writes, copied now
        async with ORIGINAL["stdio_server"](stdin=wire, stdout=wire) as (read_stream, write_stream):
            await ORIGINAL["run"](CAPTURED["server"], read_stream, write_stream, CAPTURED["options"])

    try:
        anyio.run(serve)
    finally:
        os._exit(0)


def _peek_line(sock, fds_out):
    # The first line the shim sent after ready, left in _PENDING (blocking read).
    while b"\n" not in _PENDING[0]:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 65536, 64)
        if not msg:
            os._exit(3)
        fds_out.extend(fds)
        _PENDING[0] += msg
    return _PENDING[0]


def install_data(data, fds):
    # The call's items (memfds, in the order named) and twin inputs, before its tools/call.
    items = {}
    for item, fd in zip(data.get("items", []), fds):
        items[item["name"]] = fd
    os.environ["GERMLINE_ITEM_FDS"] = json.dumps(items)
    twin = data.get("twin")
    if twin is not None:
        twin_install(int(twin["time_ns"]), int(twin["seed"]))  # germline_twin.py, prepended


class _CopyWire:
    """The copy's end of its socket as the SDK's stdin and stdout (`async for line`, `write`,
    `flush`), on the event loop. A line that starts with `{"op":` is the shim's control
    message (the call's data, with its descriptors) and is handled here, in order: everything
    the shim sends after it, the tools/call included, is read only once it is installed."""

    def __init__(self, sock, pending, fds):
        sock.setblocking(False)
        self.sock = sock
        self.buf = pending
        self.fds = fds
        self.readable = _wait("readable")
        self.writable = _wait("writable")

    def __aiter__(self):
        return self

    async def __anext__(self):
        while True:
            line = await self._line()
            if line is None:
                raise StopAsyncIteration
            if line.startswith(b'{"op":'):
                data = json.loads(line)
                if data.get("op") != "data":
                    os._exit(4)
                install_data(data, self.fds)
                self.fds = []
                continue
            return line.decode("utf-8", "replace")

    async def _line(self):
        while b"\n" not in self.buf:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 64)
            except BlockingIOError:
                await self.readable(self.sock)
                continue
            if not msg:
                return None
            self.fds.extend(fds)
            self.buf += msg
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    async def write(self, text):
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                data = data[self.sock.send(data):]
            except BlockingIOError:
                await self.writable(self.sock)

    async def flush(self):
        pass


def _wait(kind):
    import anyio
    new = getattr(anyio, f"wait_{kind}", None)  # anyio >= 4.7
    return new if new is not None else getattr(anyio, f"wait_socket_{kind}")


def _own_pidns_for_children():
    """Points our children's PID namespace back at our own (setns on a pidfd of ourselves)."""
    me = os.pidfd_open(os.getpid())
    try:
        check(libc.setns(me, CLONE_NEWPID), "setns(own pid ns)")
    finally:
        os.close(me)


def fork_loop():
    global CAP_LAST
    CAP_LAST = _last_cap()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # copies are reaped by the kernel (G4)
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(CTL, 1 << 20, 4)
        if not msg:
            os._exit(0)
        t = [time.monotonic_ns()]
        cmd = json.loads(msg)
        if cmd.get("op") != "fork" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            send_ctl({"op": "error", "reason": "expected a fork command with one descriptor"})
            continue
        # unshare(CLONE_NEWPID) works once per process: first point our children's PID namespace
        # back at our own (setns on a pidfd of ourselves), then make a fresh one (DESIGN.md).
        if cmd.get("pidns", True):
            _own_pidns_for_children()
            check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        t.append(time.monotonic_ns())
        pid = os.fork()
        if pid == 0:
            try:
                copy_main(fds[0], cmd)
            except BaseException:
                import traceback
                try:
                    os.write(fds[0], (json.dumps({"op": "error", "reason": traceback.format_exc()[-4000:]}) + "\n").encode())
                finally:
                    os._exit(2)
        t.append(time.monotonic_ns())
        os.close(fds[0])
        if cmd.get("pidns", True):
            _own_pidns_for_children()
        send_ctl({"op": "forked", "t": t})


def main():
    global SDK_IN_USE
    sys.path[:0] = CONFIG.get("path", [])
    try:
        try:
            SDK_IN_USE = probe_sdk()
        except Unsupported as e:
            fail(str(e))
        install_intercepts()
        run_release_init()
        warmed = bool(CONFIG.get("warm")) and warm(CONFIG.get("warm_calls") or ())
        settle()
        twin_index()  # germline_twin.py, prepended
        if CONFIG.get("twin"):
            # Every copy gets twin inputs: the replacements are bound here, once, so a
            # copy's twin_install only sets the call's values (germline_twin.py).
            twin_prepare()
    except SystemExit:
        raise
    except BaseException:
        import traceback
        fail(traceback.format_exc())
    # Copies are reaped by the kernel: set before ready, since the shim may freeze the germline
    # as soon as it reads it and G4 then finds SIGCHLD ignored (docs/sandbox.md).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    send_ctl({"op": "ready", "warm": warmed, "warm_failed": WARM_FAILED[:16]})
    fork_loop()


main()
