//! The twin inputs of forked Python copies (`bootstrap/python/germline_twin.py`) run by the
//! host's `python3` outside any sandbox, with `os.fork` playing the germline's fork point:
//! a germline that bound the replacements before its fork point (`twin_prepare`, what
//! `LaunchSpec::twin_forked` asks for) gives its copies the same draws, for the same twin
//! inputs, as one that leaves the binding to each copy's `twin_install`; before the data they
//! read the real clocks; `twin_touch` (a pool copy's wait) changes no value; and a name bound
//! before the index (`from time import time`) follows the twin inputs too. The sandboxed path
//! is tested through `germline run` in shim/germline/tests/run_evidence.rs.

use std::process::Command;

use proptest::prelude::*;
use serde_json::{json, Value};

const TWIN: &str = include_str!("../bootstrap/python/germline_twin.py");

/// Loads germline_twin.py as a module, indexes, prepares when asked, then forks one child per
/// `[time_ns, seed, touch]` of argv[2]; each child draws once before its twin inputs and once
/// after them. Prints `{"before": [...], "children": [{"pre": ..., "draws": [...]}]}`.
const DRIVER: &str = r#"
import datetime, json, os, random, sys, time, types, uuid
from time import time as early_time
m = types.ModuleType("germline_twin")
exec(compile(sys.stdin.read(), "germline_twin.py", "exec"), m.__dict__)
sys.modules["germline_twin"] = m
m.twin_index()
if sys.argv[1] == "prepared":
    m.twin_prepare()
real = [time.time(), early_time(), datetime.datetime.now().timestamp(), datetime.date.today().toordinal()]
def draw():
    return [time.time(), time.time_ns(), time.monotonic(), time.monotonic_ns(), time.perf_counter_ns(),
            time.process_time(), early_time(), datetime.datetime.now().isoformat(),
            datetime.datetime.utcnow().isoformat(), datetime.date.today().isoformat(),
            os.urandom(6).hex(), os.getrandom(3).hex(), random.random(), random.getrandbits(64),
            str(uuid.uuid4()), random.SystemRandom().random()]
out = {"before": real, "children": []}
for time_ns, seed, touch in json.loads(sys.argv[2]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        state = random.getstate()  # os.fork reseeded it (random's own at-fork hook)
        if touch:
            m.twin_touch()
        pre = [random.getstate() == state, time.time()]
        m.twin_install(int(time_ns), int(seed))
        os.write(w, json.dumps({"pre": pre, "draws": draw()}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        data += b
    os.waitpid(pid, 0)
    os.close(r)
    out["children"].append(json.loads(data))
print(json.dumps(out))
"#;

fn python() -> std::path::PathBuf {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .expect("python3 is not installed (scripts/setup.sh installs it)")
}

/// Runs the driver in `mode` ("prepared" or "lazy") for `children`.
fn run(mode: &str, children: &Value) -> Value {
    use std::io::Write;
    let mut child = Command::new(python())
        .args(["-I", "-c", DRIVER, mode, &children.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(TWIN.as_bytes())
        .expect("write the module");
    let out = child.wait_with_output().expect("python3 runs");
    assert!(
        out.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("driver's JSON")
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

fn draws(v: &Value) -> Vec<Value> {
    v["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| c["draws"].clone())
        .collect()
}

const T0: u64 = 1_700_000_000_000_000_000;

#[test]
fn prepared_copies_draw_what_lazily_bound_copies_draw_and_real_clocks_before_the_data() {
    let children = json!([[T0, 7, false], [T0, 7, true], [T0, 8, false]]);
    let (prepared, lazy) = (run("prepared", &children), run("lazy", &children));
    let (p, l) = (draws(&prepared), draws(&lazy));
    assert_eq!(
        p, l,
        "the same twin inputs, prepared or not, give the same draws"
    );
    assert_eq!(p[0], p[1], "twin_touch changes no draw");
    // Another seed: the same clocks, other entropy.
    let (a, b) = (
        p[0].as_array().expect("draws"),
        p[2].as_array().expect("draws"),
    );
    assert_eq!(a.len(), 16, "{a:?}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if i < 10 {
            assert_eq!(x, y, "clock {i} depends on the time only");
        } else {
            assert_ne!(x, y, "entropy {i} depends on the seed");
        }
    }
    // After the data, time.time and a name bound before the index both follow time_ns.
    let base = T0 as f64 / 1e9;
    for i in [0, 6] {
        let v = p[0][i].as_f64().expect("seconds");
        assert!(
            (v - base).abs() < 1.0,
            "draw {i}: {v} is not the twin clock"
        );
    }
    // Before the data (and in the prepared germline itself), the real clocks answer.
    for v in [&prepared, &lazy] {
        let real = v["before"].as_array().expect("before");
        for x in &real[..3] {
            let x = x.as_f64().expect("seconds");
            assert!((x - now_s()).abs() < 120.0, "{x} is not the real time");
        }
        for c in v["children"].as_array().expect("children") {
            let t = c["pre"][1].as_f64().expect("seconds");
            assert!((t - now_s()).abs() < 120.0, "a copy before its data: {t}");
        }
    }
    // twin_touch leaves the random state as it was.
    for c in prepared["children"].as_array().expect("children") {
        assert_eq!(
            c["pre"][0],
            json!(true),
            "twin_touch changed the random state"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Any twin inputs: a prepared germline's copies draw what lazily bound copies draw.
    #[test]
    fn any_twin_inputs_draw_the_same_prepared_or_not(
        time_ns in 0u64..4_000_000_000_000_000_000,
        seed in any::<u64>(),
        touch in any::<bool>(),
    ) {
        let children = json!([[time_ns, seed, touch]]);
        prop_assert_eq!(draws(&run("prepared", &children)), draws(&run("lazy", &children)));
    }
}
