# germline twin inputs for Python copies (paper A4, Section IV-F; issue 10 item 1).
#
# Prepended to the bootstrap (germline.rs concatenates the two files), so it is one program.
# `twin_install(time_ns, seed)` runs in a copy after its data arrived, before the release's
# code serves the call. Every copy of one call gets the same (time_ns, seed) from the broker,
# which chose them without reading item contents. From them the copy's clocks and entropy are
# derived, so that two copies that draw in the same order draw the same values:
#   time.time/_ns, time.monotonic/_ns, time.perf_counter/_ns, time.process_time/_ns,
#   time.thread_time/_ns, datetime.datetime.now/utcnow/today, datetime.date.today,
#   os.urandom, os.getrandom, random (the global instance, reseeded; SystemRandom via
#   random._urandom), secrets (through SystemRandom), uuid.uuid4 (os.urandom), numpy's global
#   RandomState if numpy is loaded (and default_rng() via secrets).
# Each clock starts at its base and advances 1 µs per read, so loops that wait for time to
# pass still end, identically in every copy.
# Outside (not controlled): the CPU cycle counter (rdtsc), native code that calls
# clock_gettime/getrandom itself or reads /dev/urandom as a file, the vDSO, and the event
# loop's own clock (asyncio keeps the real monotonic clock so that its timeouts work; it
# only orders the loop's own work). Those remain nondeterminism for the probe's control run
# to expose (Table XIV: "unverified nondeterminism").
import time as _twin_time

try:
    # CPython's own SHA-256 (the same digest as OpenSSL's): its first use in a forked copy
    # costs 0.02 ms, OpenSSL's 0.09 ms however warm the germline's is.
    from _sha2 import sha256 as _twin_sha256  # 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _twin_sha256  # 3.11 and earlier
    except ImportError:
        from hashlib import sha256 as _twin_sha256

# The real monotonic clock, for asyncio's loop (in a tuple: the index below rebinds every
# module-level name bound to an original, this module's own included).
_REAL_MONOTONIC = (_twin_time.monotonic,)


class _TwinStream:
    """A deterministic byte stream: SHA-256(seed, counter) blocks."""

    def __init__(self, seed):
        self.seed = int(seed).to_bytes(8, "little")
        self.counter = 0
        self.buf = b""

    def read(self, n):
        n = int(n)
        if n < 0:
            raise ValueError("negative argument not allowed")
        while len(self.buf) < n:
            self.buf += _twin_sha256(
                b"germline-twin" + self.seed + self.counter.to_bytes(8, "little")).digest()
            self.counter += 1
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


TWIN = {}

# The call's twin state once `twin_install` ran: (stream, wall, mono, perf, cpu), each clock a
# one-element list holding its next value in ns. None until then: every replacement answers
# as the original it replaced.
_TWIN_LIVE = [None]
# Whether `twin_prepare` installed the replacements (in the germline, before its fork point,
# when the shim said its copies get twin inputs: CONFIG["twin"]).
_TWIN_PREPARED = [False]

# Where modules loaded before the fork bound an original clock or entropy function under a
# name of their own (`from time import time`): (module dict, key, original). Built once in
# the germline (twin_index, after its imports and warming), so that the replacements are
# bound to those few names instead of walking every module's namespace, which touches (and
# so copies, page by page) most of the interpreter's heap.
_TWIN_SITES = None
# sys.modules as the last twin_index walked it: name -> id of the module.
_TWIN_SEEN = None


def _twin_originals():
    import datetime as _dt
    import os as _os
    import time as _time
    names = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
             "process_time", "process_time_ns", "thread_time", "thread_time_ns")
    out = [getattr(_time, n) for n in names if hasattr(_time, n)]
    out += [_os.urandom, _dt.datetime, _dt.date]
    if hasattr(_os, "getrandom"):
        out.append(_os.getrandom)
    return out


def twin_index():
    """Records every module-level binding of an original (see _TWIN_SITES). Again in a pool
    copy after its warming session: then only the modules loaded since the last index are
    walked (none when the session imported nothing), since walking a namespace touches the
    reference count of every object in it, which copies (copy-on-write) most of the heap."""
    global _TWIN_SITES, _TWIN_SEEN
    import datetime as _dt
    import sys as _sys
    import time as _time
    if _TWIN_PREPARED[0] or (_TWIN_SEEN is not None and len(_sys.modules) == len(_TWIN_SEEN)):
        # Prepared: modules loaded since bound the replacements, not the originals.
        return
    originals = {id(o): o for o in _twin_originals()}
    sites = list(_TWIN_SITES or ())
    seen = {}
    for name, mod in list(_sys.modules.items()):
        seen[name] = id(mod)
        if _TWIN_SEEN is not None and _TWIN_SEEN.get(name) == id(mod):
            continue
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict) or mod is _time or mod is _dt:
            continue
        for k, v in list(d.items()):
            if id(v) in originals and originals[id(v)] is v:
                sites.append((d, k, v))
    _TWIN_SITES = sites
    _TWIN_SEEN = seen


def _twin_clock(orig, which, seconds):
    # time.<name>: the original until the call's state is installed, then clock `which` of
    # it (1 wall, 2 monotonic, 3 perf_counter, 4 CPU), advancing 1 µs per read; in seconds
    # (a float) or nanoseconds.
    scale = 1e9 if seconds else None

    def clock():
        live = _TWIN_LIVE[0]
        if live is None:
            return orig()
        c = live[which]
        v = c[0]
        c[0] = v + 1000
        return v if scale is None else v / scale

    clock.__name__ = clock.__qualname__ = getattr(orig, "__name__", "clock")
    return clock


def twin_prepare():
    """Installs the replacements of every clock and entropy function named at the top, bound
    wherever the index found an original, each answering as its original until
    `twin_install` sets the call's state. Nothing here depends on a call, so the germline runs
    it once before its fork point (CONFIG["twin"]) and a copy's `twin_install` only sets a few
    values: the module namespaces, the replacement classes and the digest's first use are then
    the germline's pages, not copied (copy-on-write) on the call's path."""
    import datetime as _dt
    import os as _os
    import random as _random
    import time as _time

    if _TWIN_PREPARED[0]:
        return
    if _TWIN_SITES is None:
        twin_index()  # where the originals are bound, before they are replaced
    which = {"time": 1, "monotonic": 2, "perf_counter": 3, "process_time": 4, "thread_time": 4}
    replace = {}
    for base, w in which.items():
        for name, seconds in ((base, True), (base + "_ns", False)):
            orig = getattr(_time, name, None)
            if orig is not None:
                f = _twin_clock(orig, w, seconds)
                replace[id(orig)] = f
                setattr(_time, name, f)

    real_urandom = _os.urandom

    def urandom(n):
        live = _TWIN_LIVE[0]
        return real_urandom(n) if live is None else live[0].read(n)

    replace[id(real_urandom)] = urandom
    _os.urandom = urandom
    if hasattr(_os, "getrandom"):
        real_getrandom = _os.getrandom

        def getrandom(size, flags=0):
            live = _TWIN_LIVE[0]
            return real_getrandom(size, flags) if live is None else live[0].read(size)

        replace[id(real_getrandom)] = getrandom
        _os.getrandom = getrandom
    _random._urandom = urandom

    wall_s = _time.time  # the replacement: the wall clock of the call's twin inputs
    base_dt, base_date = _dt.datetime, _dt.date

    class datetime(base_dt):  # noqa: N801 (keeps the class's public name)
        @classmethod
        def now(cls, tz=None):
            if _TWIN_LIVE[0] is None:
                return super().now(tz)
            return cls.fromtimestamp(wall_s(), tz)

        @classmethod
        def utcnow(cls):
            if _TWIN_LIVE[0] is None:
                return super().utcnow()
            return cls.utcfromtimestamp(wall_s())

        @classmethod
        def today(cls):
            if _TWIN_LIVE[0] is None:
                return super().today()
            return cls.fromtimestamp(wall_s())

    class date(base_date):  # noqa: N801
        @classmethod
        def today(cls):
            if _TWIN_LIVE[0] is None:
                return super().today()
            return cls.fromtimestamp(wall_s())

    replace[id(base_dt)] = datetime
    replace[id(base_date)] = date
    _dt.datetime, _dt.date = datetime, date

    # Modules that imported a name before (`from time import time`, `from datetime import
    # datetime`) hold the originals: rebind them too, from the index (modules loaded from now
    # on import the replacements).
    for d, k, orig in _TWIN_SITES:
        r = replace.get(id(orig))
        if r is not None and d.get(k) is orig:
            try:
                d[k] = r
            except Exception:
                pass

    # asyncio's loop keeps the real clock: its timers must expire.
    try:
        import asyncio.base_events as aio
        aio.BaseEventLoop.time = lambda self, _m=_REAL_MONOTONIC[0]: _m()
    except ImportError:
        pass
    _TwinStream(0).read(1)  # the digest's first use, here rather than in every copy
    _TWIN_PREPARED[0] = True


def twin_touch():
    """In a pool copy while it waits for its call: the pages its `twin_install` writes are
    written now (copy-on-write) with the values they hold, so nothing changes but where the
    copying happens."""
    import random as _random

    if not _TWIN_PREPARED[0]:
        return
    _TwinStream(0).read(1)
    _random.setstate(_random.getstate())


def twin_install(time_ns, seed):
    """The call's twin inputs, from its data: every replacement follows them from now on."""
    import random as _random
    import sys as _sys

    twin_prepare()  # done in the germline already when its copies get twin inputs
    stream = _TwinStream(seed)
    # Monotonic-like clocks start at fixed bases that depend on nothing of the host.
    _TWIN_LIVE[0] = (stream, [int(time_ns)], [1_000_000_000_000], [1_000_000_000], [0])
    _random.seed(int.from_bytes(stream.read(32), "little"))
    np = _sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(int.from_bytes(stream.read(4), "little"))
        except Exception:
            pass
    TWIN.update({"time_ns": int(time_ns), "seed": int(seed)})
