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
import hashlib as _twin_hashlib


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
            self.buf += _twin_hashlib.sha256(
                b"germline-twin" + self.seed + self.counter.to_bytes(8, "little")).digest()
            self.counter += 1
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


class _TwinClock:
    def __init__(self, base_ns):
        self.next = int(base_ns)

    def ns(self):
        v = self.next
        self.next += 1000
        return v

    def s(self):
        return self.ns() / 1e9


TWIN = {}

# Where modules loaded before the fork bound an original clock or entropy function under a
# name of their own (`from time import time`): (module dict, key, original). Built once in
# the germline (twin_index, after its imports and warming), so that a copy's twin_install
# rebinds those few names instead of walking every module's namespace, which touches (and
# so copies, page by page) most of the interpreter's heap on the call's path.
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
    if _TWIN_SEEN is not None and len(_sys.modules) == len(_TWIN_SEEN):
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


def twin_install(time_ns, seed):
    import datetime as _dt
    import os as _os
    import random as _random
    import sys as _sys
    import time as _time

    stream = _TwinStream(seed)
    wall = _TwinClock(time_ns)
    # Monotonic-like clocks start at fixed bases that depend on nothing of the host.
    mono = _TwinClock(1_000_000_000_000)
    perf = _TwinClock(1_000_000_000)
    cpu = _TwinClock(0)
    real_monotonic = _time.monotonic

    def urandom(n):
        return stream.read(n)

    def getrandom(size, flags=0):
        return stream.read(size)

    fns = {
        "time": wall.s, "time_ns": wall.ns,
        "monotonic": mono.s, "monotonic_ns": mono.ns,
        "perf_counter": perf.s, "perf_counter_ns": perf.ns,
        "process_time": cpu.s, "process_time_ns": cpu.ns,
        "thread_time": cpu.s, "thread_time_ns": cpu.ns,
    }
    replace = {}
    for name, f in fns.items():
        if hasattr(_time, name):
            replace[id(getattr(_time, name))] = f
            setattr(_time, name, f)
    replace[id(_os.urandom)] = urandom
    _os.urandom = urandom
    if hasattr(_os, "getrandom"):
        replace[id(_os.getrandom)] = getrandom
        _os.getrandom = getrandom
    _random._urandom = urandom

    base_dt, base_date = _dt.datetime, _dt.date

    class datetime(base_dt):  # noqa: N801 (keeps the class's public name)
        @classmethod
        def now(cls, tz=None):
            return cls.fromtimestamp(wall.s(), tz)

        @classmethod
        def utcnow(cls):
            return cls.utcfromtimestamp(wall.s())

        @classmethod
        def today(cls):
            return cls.fromtimestamp(wall.s())

    class date(base_date):  # noqa: N801
        @classmethod
        def today(cls):
            return cls.fromtimestamp(wall.s())

    replace[id(base_dt)] = datetime
    replace[id(base_date)] = date
    _dt.datetime, _dt.date = datetime, date

    # Modules that imported a name before the fork (`from time import time`, `from datetime
    # import datetime`) hold the originals: rebind them too, from the germline's index when
    # it has one (modules loaded since then imported the replacements already).
    if _TWIN_SITES is not None:
        for d, k, orig in _TWIN_SITES:
            r = replace.get(id(orig))
            if r is not None and d.get(k) is orig:
                try:
                    d[k] = r
                except Exception:
                    pass
    for mod in (() if _TWIN_SITES is not None else list(_sys.modules.values())):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict) or mod is _time or mod is _dt:
            continue
        for k, v in list(d.items()):
            r = replace.get(id(v))
            if r is not None:
                try:
                    d[k] = r
                except Exception:
                    pass

    # asyncio's loop keeps the real clock: its timers must expire.
    try:
        import asyncio.base_events as aio
        aio.BaseEventLoop.time = lambda self: real_monotonic()
    except ImportError:
        pass

    _random.seed(int.from_bytes(stream.read(32), "little"))
    np = _sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(int.from_bytes(stream.read(4), "little"))
        except Exception:
            pass
    TWIN.update({"time_ns": int(time_ns), "seed": int(seed)})
