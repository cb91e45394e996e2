"""The scripted session of README's first command: a benign tool and a signed Trojan update of
it (stashes an earlier call's salary sheet and adds it to the next authorised request), each
run under `sig-pin` (a verified, pinned release in one persistent process) and under
`germline`, with the real MCP client SDK as the agent. Prints what the OCR sink received.

    python3 demo.py --germline BIN --bundles DIR --key PUB --work DIR"""
import argparse
import json
import os
import secrets
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--germline", required=True)
    ap.add_argument("--bundles", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    home = os.path.join(a.work, "home", "alice")
    for d in ("finance", "hr"):
        os.makedirs(os.path.join(home, d), exist_ok=True)
    canary = "CANARY-HR-" + secrets.token_hex(6)
    invoice = os.path.join(home, "finance", "invoice-117.txt")
    salary = os.path.join(home, "hr", "salaries-2026.csv")
    with open(invoice, "w") as f:
        f.write("INVOICE 2026-117\nACME Scanning Ltd\nTotal due: EUR 1,250.00\n")
    with open(salary, "w") as f:
        f.write(f"name,salary\nalice,91234\nbob,87650\n{canary},1\n")

    sink_log = os.path.join(a.work, "ocr-sink.jsonl")
    sink = subprocess.Popen([sys.executable, os.path.join(HERE, "sink.py"), "--port", "0",
                             "--seconds", "600", "--log", sink_log], stdout=subprocess.PIPE, text=True)
    port = int(sink.stdout.readline().split()[1])
    policy = os.path.join(a.work, "policy.toml")
    with open(policy, "w") as f:
        f.write(f"""# The deployer's policy of the demo: invoices may go to the OCR service; salaries may not.
[labels]
hr = "salaries and personnel records"
finance = "invoices"

[[item]]
path = "{a.work}/home/*/hr/**"
label = ["hr"]

[[item]]
path = "{a.work}/home/*/finance/**"
label = ["finance"]

[destinations]
"ocr.example" = ["finance"]

[pins]
"ocr.example" = "127.0.0.1:{port}"

[consumers]
agent = ["hr", "finance"]
""")
    script = os.path.join(a.work, "session.json")
    with open(script, "w") as f:
        json.dump([{"tool": "ocr_annotate", "arguments": {"invoice": invoice, "salary_sheet": salary},
                    "repeat": a.calls}], f)

    print(f"germline demo: an OCR tool gets an invoice (finance) and a salary sheet (hr) in each call.")
    print(f"  policy: ocr.example is cleared for finance only; the salary sheet carries {canary}")
    print()
    rows = []
    outputs = {}
    try:
        for release, what in (("germline-office", "1.0.0, benign"),
                              ("germline-office-pool", "1.1.0, signed Trojan update: pools earlier inputs")):
            for mode in ("sig-pin", "germline"):
                open(sink_log, "w").close()
                cmd = [a.germline, "run", "--policy", policy, "--key", a.key, "--mode", mode,
                       "--state-dir", os.path.join(a.work, "broker"),
                       os.path.join(a.bundles, release, "bundle")]
                out = subprocess.run([sys.executable, os.path.join(HERE, "agent.py"), script, "--"] + cmd,
                                     capture_output=True, text=True, timeout=300)
                if out.returncode != 0:
                    print(out.stderr[-3000:])
                    raise SystemExit(f"demo: the agent session failed ({release}, {mode})")
                calls = [json.loads(l) for l in out.stdout.splitlines() if '"tool"' in l]
                outputs[(release, mode)] = [c["text"] for c in calls]
                with open(sink_log) as f:
                    bodies = [json.loads(l)["body"] for l in f if l.strip()]
                leaks = sum(b.count(canary) for b in bodies)
                print(f"== {release} ({what}) under {mode}")
                for i, b in enumerate(bodies, 1):
                    shown = b.strip().replace("\n", " | ")
                    flag = "   <-- LEAK: salary data" if canary in b else ""
                    print(f"   ocr.example received #{i}: {shown[:110]}{flag}")
                if not bodies:
                    print("   ocr.example received nothing")
                label = (calls[-1].get("meta") or {}).get("germline", {}).get("label")
                print(f"   agent got: {calls[-1]['text'][0].splitlines()[-1]!r}"
                      + (f"  (output label {label})" if label is not None else ""))
                rows.append((release, mode, len(bodies), leaks))
    finally:
        sink.kill()
    print()
    print(f"{'release':<24} {'runtime':<10} {'requests':>8} {'canaries leaked':>16}")
    for r in rows:
        print(f"{r[0]:<24} {r[1]:<10} {r[2]:>8} {r[3]:>16}")
    same = outputs[("germline-office", "sig-pin")] == outputs[("germline-office", "germline")]
    print()
    print(f"benign outputs identical under sig-pin and germline: {'yes' if same else 'NO'}")
    trojan_pin = [r for r in rows if r[0] == "germline-office-pool" and r[1] == "sig-pin"][0][3]
    trojan_germ = [r for r in rows if r[0] == "germline-office-pool" and r[1] == "germline"][0][3]
    print(f"Trojan under sig-pin sent {trojan_pin} copies of the salary canary to ocr.example; under germline {trojan_germ}.")
    if not (same and trojan_pin > 0 and trojan_germ == 0):
        raise SystemExit("demo: unexpected result")


if __name__ == "__main__":
    main()
