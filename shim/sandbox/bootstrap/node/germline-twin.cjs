// germline twin inputs for spawned Node copies (paper A4, Section IV-F; issue 28).
//
// Loaded before the release's entry by `NODE_OPTIONS=--require /run/germline-twin.cjs` (the
// shim bind-mounts this file read-only there; engine::twin_node). It is the Node counterpart
// of the Python bootstrap's germline_twin.py: every copy of one call gets the same
// (time_ns, seed) from the broker, which chose them without reading item contents, and from
// them the copy's clocks and entropy are derived, so two copies that draw in the same order
// draw the same values and a flow-compliant tool that stamps its requests with the time or a
// nonce does not trip the tripwire.
//
// How the values arrive: a spawned copy runs the release's own entry, with no bootstrap and
// no control socket, only its MCP stream on stdin and stdout. Just before a call's
// `tools/call`, the shim writes one line `#germline-twin {"time_ns":"...","seed":"..."}` on
// that stream (no JSON-RPC message starts with `#`). This file takes that line off the stream
// where the socket's bytes enter Node (`process.stdin.push`, before any reader sees them), so
// the server never sees it, and switches the clocks and entropy below to the twin values.
// Until then (start-up, the MCP handshake, the manifest's warm calls) every function below
// answers as the original does: nothing changes for a copy that never gets the line.
//
// Covered once switched: Date.now, new Date() and Date() without arguments, performance.now,
// process.hrtime and process.hrtime.bigint, Math.random, crypto.randomBytes, randomFillSync,
// randomFill, randomInt, randomUUID, and the Web Crypto object's getRandomValues and
// randomUUID (globalThis.crypto, crypto.webcrypto, crypto.getRandomValues). Each clock starts
// at its base and advances 1 us per read, so loops that wait for time to pass still end,
// identically in every copy. ES module imports of node:crypto see the same functions
// (module.syncBuiltinESMExports).
// Outside (not controlled, left for the probe's control run to expose as "unverified
// nondeterminism", Table XIV): timers and the event loop's own clock (libuv keeps the real
// one so that timeouts expire), process.uptime, process.cpuUsage, os.uptime,
// performance.timeOrigin, the deprecated crypto.pseudoRandomBytes/prng/rng, file times,
// native addons, and /dev/urandom read as a file.
"use strict";

(() => {
  const crypto = require("crypto");
  const { performance } = require("perf_hooks");

  const MARK = Buffer.from("#germline-twin ");
  const NL = 0x0a;

  // The twin values once the line came: null until then.
  let twin = null;

  // A deterministic byte stream: SHA-256("germline-twin" || seed LE64 || counter LE64)
  // blocks, as germline_twin.py makes it.
  class Stream {
    constructor(seed) {
      this.seed = Buffer.alloc(8);
      this.seed.writeBigUInt64LE(BigInt.asUintN(64, seed));
      this.counter = 0n;
      this.buf = Buffer.alloc(0);
    }
    read(n) {
      const parts = [this.buf];
      let have = this.buf.length;
      while (have < n) {
        const c = Buffer.alloc(8);
        c.writeBigUInt64LE(this.counter);
        this.counter += 1n;
        const block = crypto
          .createHash("sha256")
          .update("germline-twin")
          .update(this.seed)
          .update(c)
          .digest();
        parts.push(block);
        have += block.length;
      }
      const all = Buffer.concat(parts, have);
      this.buf = all.subarray(n);
      return all.subarray(0, n);
    }
  }

  // A clock in nanoseconds (BigInt) that advances 1 us per read.
  class Clock {
    constructor(base) {
      this.next = base;
    }
    ns() {
      const v = this.next;
      this.next += 1000n;
      return v;
    }
  }

  // The twin values of a twin line's JSON, or null if it is not one.
  function parse(json) {
    let v;
    try {
      v = JSON.parse(json);
    } catch {
      return null;
    }
    let timeNs;
    let seed;
    try {
      timeNs = BigInt(v.time_ns);
      seed = BigInt(v.seed);
    } catch {
      return null;
    }
    return {
      stream: new Stream(seed),
      wall: new Clock(timeNs),
      // Monotonic clocks start at fixed bases that depend on nothing of the host.
      perf: new Clock(1000000000n),
      mono: new Clock(1000000000000n),
    };
  }

  function install(json) {
    const t = parse(json);
    if (t) twin = t;
  }

  // Warmed now, at start, what the call's first twin draw runs: a process's first SHA-256 costs
  // ~0.4 ms and its first BigInt buffer write ~0.2 ms, which would otherwise fall on the
  // call's path (measured on a pooled server-everything `echo`).
  {
    const t = parse('{"time_ns":"0","seed":"0"}');
    if (t) {
      t.stream.read(40);
      t.wall.ns();
    }
  }

  // --- the stream: the twin line taken off stdin before any reader sees it -------------
  // State across chunks: whether the next byte starts a line, and an incomplete line that
  // began with the mark (held back until its newline comes).
  let atLineStart = true;
  let held = null;

  // Returns what the server gets of `chunk` (a Buffer), with every complete twin line taken
  // out and installed.
  function filter(chunk) {
    // No `#` and nothing held: no twin line starts in this chunk, which passes as it is (the
    // common case, every chunk but the call's first).
    if (!held && chunk.indexOf(0x23) < 0) {
      if (chunk.length > 0) atLineStart = chunk[chunk.length - 1] === NL;
      return chunk;
    }
    let data = held ? Buffer.concat([held, chunk]) : chunk;
    held = null;
    const out = [];
    let i = 0;
    while (i < data.length) {
      if (atLineStart) {
        const rest = data.length - i;
        const cmp = Math.min(rest, MARK.length);
        if (data.compare(MARK, 0, cmp, i, i + cmp) === 0) {
          const nl = data.indexOf(NL, i);
          if (nl < 0) {
            // The mark (or its start) without the line's end yet: hold it back.
            held = Buffer.from(data.subarray(i));
            break;
          }
          // A newline after a match means the whole mark matched (it holds no newline).
          install(data.toString("utf8", i + MARK.length, nl));
          i = nl + 1;
          continue;
        }
      }
      const nl = data.indexOf(NL, i);
      const end = nl < 0 ? data.length : nl + 1;
      out.push(data.subarray(i, end));
      atLineStart = nl >= 0;
      i = end;
    }
    if (out.length === 1) return out[0];
    return Buffer.concat(out);
  }

  const stdin = process.stdin;
  const push = stdin.push;
  stdin.push = function germlineTwinPush(chunk, encoding) {
    if (chunk === null || chunk === undefined) {
      if (held) {
        // The stream ends inside a line that began with the mark: it was not a twin line.
        const rest = held;
        held = null;
        push.call(this, rest);
      }
      return push.call(this, chunk, encoding);
    }
    const buf = typeof chunk === "string" ? Buffer.from(chunk, encoding) : chunk;
    if (!Buffer.isBuffer(buf)) return push.call(this, chunk, encoding);
    const kept = filter(buf);
    if (kept.length === 0) return true;
    return push.call(this, kept);
  };

  // --- clocks ----------------------------------------------------------------------------
  const wallMs = () => Number(twin.wall.ns() / 1000n) / 1000;
  const OrigDate = Date;
  const origNow = Date.now;
  function TwinDate(...args) {
    if (!new.target) {
      return twin ? new OrigDate(wallMs()).toString() : OrigDate();
    }
    if (args.length === 0 && twin) {
      return Reflect.construct(OrigDate, [wallMs()], new.target);
    }
    return Reflect.construct(OrigDate, args, new.target);
  }
  Object.setPrototypeOf(TwinDate, OrigDate);
  Object.defineProperty(TwinDate, "prototype", { value: OrigDate.prototype });
  Object.defineProperty(TwinDate, "name", { value: "Date" });
  TwinDate.now = function now() {
    return twin ? Math.floor(wallMs()) : origNow();
  };
  globalThis.Date = TwinDate;

  const origPerfNow = performance.now;
  performance.now = function now() {
    return twin ? Number(twin.perf.ns()) / 1e6 : origPerfNow.call(performance);
  };

  const origHrtime = process.hrtime;
  const origBigint = process.hrtime.bigint;
  function hrtime(prev) {
    if (!twin) return origHrtime.call(process, prev);
    const t = twin.mono.ns();
    let s = t / 1000000000n;
    let n = t % 1000000000n;
    if (Array.isArray(prev)) {
      s -= BigInt(prev[0]);
      n -= BigInt(prev[1]);
      if (n < 0n) {
        s -= 1n;
        n += 1000000000n;
      }
    }
    return [Number(s), Number(n)];
  }
  hrtime.bigint = function bigint() {
    return twin ? twin.mono.ns() : origBigint.call(process.hrtime);
  };
  process.hrtime = hrtime;

  // --- entropy -----------------------------------------------------------------------------
  const origRandom = Math.random;
  Math.random = function random() {
    if (!twin) return origRandom();
    const b = twin.stream.read(8);
    // 53 random bits in [0, 1).
    const hi = b.readUInt32LE(0) >>> 5;
    const lo = b.readUInt32LE(4) >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  };

  // Fills `byteLength` bytes of a view (or ArrayBuffer) from the stream, from byte `start`.
  function fillBytes(buf, start, n) {
    const bytes =
      buf instanceof ArrayBuffer || buf instanceof SharedArrayBuffer
        ? new Uint8Array(buf)
        : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    bytes.set(twin.stream.read(n), start);
    return buf;
  }
  const fillView = (view) => fillBytes(view, 0, view.byteLength);

  const orig = {
    randomBytes: crypto.randomBytes,
    randomFillSync: crypto.randomFillSync,
    randomFill: crypto.randomFill,
    randomInt: crypto.randomInt,
    randomUUID: crypto.randomUUID,
  };

  function randomBytes(size, cb) {
    if (!twin) return orig.randomBytes.apply(crypto, arguments);
    const buf = Buffer.from(twin.stream.read(size));
    if (typeof cb === "function") {
      process.nextTick(cb, null, buf);
      return undefined;
    }
    return buf;
  }

  // Offsets and sizes count elements of a typed array (bytes of anything else), as Node's.
  function randomFillSync(buf, offset, size) {
    if (!twin) return orig.randomFillSync.apply(crypto, arguments);
    const el = buf.BYTES_PER_ELEMENT || 1;
    const off = (offset === undefined ? 0 : offset) * el;
    const n = size === undefined ? buf.byteLength - off : size * el;
    if (!(off >= 0 && n >= 0 && off + n <= buf.byteLength)) {
      // The original's range errors.
      return orig.randomFillSync.apply(crypto, arguments);
    }
    return fillBytes(buf, off, n);
  }

  function randomFill(buf, offset, size, cb) {
    if (!twin) return orig.randomFill.apply(crypto, arguments);
    let o = offset;
    let s = size;
    let done = cb;
    if (typeof offset === "function") {
      done = offset;
      o = undefined;
      s = undefined;
    } else if (typeof size === "function") {
      done = size;
      s = undefined;
    }
    randomFillSync(buf, o, s);
    process.nextTick(done, null, buf);
    return undefined;
  }

  function uniformBelow(range) {
    // Rejection sampling over 48 bits, as Node's randomInt does.
    const RAND_MAX = 0xffffffffffff;
    const limit = RAND_MAX - (RAND_MAX % range);
    for (;;) {
      const x = twin.stream.read(6).readUIntBE(0, 6);
      if (x < limit) return x % range;
    }
  }

  function randomInt(min, max, cb) {
    if (!twin) return orig.randomInt.apply(crypto, arguments);
    let lo = min;
    let hi = max;
    let done = cb;
    if (typeof max === "undefined" || typeof max === "function") {
      done = max;
      hi = min;
      lo = 0;
    }
    if (!Number.isSafeInteger(lo) || !Number.isSafeInteger(hi) || hi <= lo) {
      // The original's argument errors.
      return orig.randomInt.apply(crypto, arguments);
    }
    const v = lo + uniformBelow(hi - lo);
    if (typeof done === "function") {
      process.nextTick(done, null, v);
      return undefined;
    }
    return v;
  }

  function uuidFrom(b) {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Buffer.from(b).toString("hex");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  function randomUUID() {
    if (!twin) return orig.randomUUID.apply(crypto, arguments);
    return uuidFrom(Buffer.from(twin.stream.read(16)));
  }

  crypto.randomBytes = randomBytes;
  crypto.randomFillSync = randomFillSync;
  crypto.randomFill = randomFill;
  crypto.randomInt = randomInt;
  crypto.randomUUID = randomUUID;
  // crypto.getRandomValues is a getter Node does not let anyone redefine: it answers the
  // Web Crypto object's method, replaced below.

  // The Web Crypto object (globalThis.crypto, crypto.webcrypto): its methods live on its
  // prototype and check their receiver, so the instance gets its own.
  const web = crypto.webcrypto;
  if (web && typeof web.getRandomValues === "function") {
    const webGet = web.getRandomValues;
    const webUUID = web.randomUUID;
    Object.defineProperty(web, "getRandomValues", {
      configurable: true,
      writable: true,
      value: function getRandomValues(view) {
        return twin ? fillView(view) : webGet.call(web, view);
      },
    });
    if (typeof webUUID === "function") {
      Object.defineProperty(web, "randomUUID", {
        configurable: true,
        writable: true,
        value: function randomUUID() {
          return twin ? uuidFrom(Buffer.from(twin.stream.read(16))) : webUUID.call(web);
        },
      });
    }
  }

  try {
    require("module").syncBuiltinESMExports();
  } catch {
    // Older Node: ES module imports of node:crypto keep the originals.
  }
})();
