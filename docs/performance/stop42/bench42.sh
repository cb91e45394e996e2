#!/usr/bin/env bash
# Quiet-machine A/B for stop 42: BASE (main 8b53b06, stop 41) vs NEW (branch twin42 merged), release builds.
#   BASE_DIR=/var/tmp/germline-release-base/release NEW_DIR=/var/tmp/germline-release-new/release \
#     bash docs/performance/stop42/bench42.sh OUT [ROUNDS]
# The git bench repository and policy are those of docs/performance/stop41/bench41.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
out=${1:-/var/tmp/bench42}; rounds=${2:-3}; mkdir -p $out
key=$root/bundles/out/keys/cosign.pub
d=/tmp/germline-bench-git
if [ ! -d $d/repo ]; then
  rm -rf $d; mkdir -p $d/repo/src; (cd $d/repo
  git init -q -b main; git config user.name A; git config user.email a@example.com
  echo hello > README; echo 'fn main() {}' > src/main.rs; git add .; git commit -q -m first; echo more >> README)
  printf '[labels]\nfinance = "invoices"\n\n[[item]]\npath = "%s/repo/**"\nlabel = []\n\n[[argument]]\ntool = "git_*"\nname = "*"\nlabel = []\n\n[consumers]\nagent = ["finance"]\n' $d > $d/policy.toml
fi
echo "== load $(uptime)"
echo "== git_status (issue 27), base and new alternated, pool 2, 100 calls at 20 ms"
for r in $(seq 1 $rounds); do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; else b=$NEW_DIR; fi
  $b/germline run-bench --quiet --key $key --policy $d/policy.toml \
    --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" --modes sig-pin,germline \
    --pool 2 --calls 100 --warmup 20 --gap-ms 20 --state-dir $out/st-git-$v --out $out/git-$v-r$r.json \
    bundles/out/mcp-server-git/bundle > $out/git-$v-r$r.txt 2>&1 || echo "run failed: $out/git-$v-r$r.txt"
  echo "git $v r$r: $(grep -E '^(sig-pin|germline) ' $out/git-$v-r$r.txt | tr -s ' ' | cut -d' ' -f1-4 | tr '\n' '|') load $(cut -d' ' -f1 /proc/loadavg)"
done; done
echo "== git_status in process (phases, release), base and new alternated, pool 2, 100 calls at 20 ms"
for r in 1 2; do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; else b=$NEW_DIR; fi
  mkdir -p $out/st-ph-$v
  $b/examples/phases --policy $d/policy.toml --key $key --pool 2 --state-dir $out/st-ph-$v \
    $root/bundles/out/mcp-server-git/bundle --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" \
    --calls 100 --warmup 20 --gap-ms 20 --cpu > $out/git-phases-$v-r$r.txt 2>&1 || echo "phases failed: $out/git-phases-$v-r$r.txt"
  echo "phases $v r$r: $(grep -E 'handle p50| copy.mcp ' $out/git-phases-$v-r$r.txt | tr -s ' ' | tr '\n' '|')"
done; done
if [ "${TIME_AB:-1}" = 1 ]; then
  echo "== mcp-server-time (forked Python, twin inputs on) bench-ab, 2 rounds"
  bash scripts/bench-ab.sh $BASE_DIR/germline $NEW_DIR/germline $out/ab 2
fi
echo "== done $(date)"
