#!/usr/bin/env bash
# Quiet-machine A/B for stop 41: BASE (main 1eb3697) vs NEW (merged main), release builds.
#   BASE_DIR=/var/tmp/germline-release-base/release NEW_DIR=/var/tmp/germline-release-new/release bash docs/performance/stop41/bench41.sh OUT
set -euo pipefail
cd /work/main
out=${1:-/var/tmp/bench41}; mkdir -p $out
key=$PWD/bundles/out/keys/cosign.pub; pol=$PWD/config/policy.example.toml
d=/tmp/germline-bench-git
if [ ! -d $d/repo ]; then
  rm -rf $d; mkdir -p $d/repo/src; (cd $d/repo
  git init -q -b main; git config user.name A; git config user.email a@example.com
  echo hello > README; echo 'fn main() {}' > src/main.rs; git add .; git commit -q -m first; echo more >> README)
  cat > $d/policy.toml <<POLICY
[labels]
finance = "invoices"

[[item]]
path = "$d/repo/**"
label = []

[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = ["finance"]
POLICY
fi
echo "== load $(uptime)"
echo "== git_status (issue 27), base and new alternated, pool 2, 100 calls at 20 ms"
for r in 1 2 3; do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; else b=$NEW_DIR; fi
  $b/germline run-bench --quiet --key $key --policy $d/policy.toml \
    --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" --modes sig-pin,germline \
    --pool 2 --calls 100 --warmup 20 --gap-ms 20 --state-dir $out/st-git-$v --out $out/git-$v-r$r.json \
    bundles/out/mcp-server-git/bundle > $out/git-$v-r$r.txt 2>&1 || echo "run failed: $out/git-$v-r$r.txt"
  echo "git $v r$r: $(grep -E '^(sig-pin|germline) ' $out/git-$v-r$r.txt | tr -s ' ' | cut -d' ' -f1-4 | tr '\n' '|')"
done; done
echo "== git_status in process (new)"
mkdir -p $out/st-ph
(cd $NEW_DIR && ./examples/phases --policy $d/policy.toml --key $key --pool 2 --state-dir $out/st-ph \
  /work/main/bundles/out/mcp-server-git/bundle --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" \
  --calls 100 --warmup 20) > $out/git-phases-new.txt 2>&1 || true
echo "== Node echo (issue 28), base and new alternated, pool 4, 40 calls at 600 ms"
for r in 1 2 3; do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; else b=$NEW_DIR; fi
  $b/germline run-bench --quiet --key $key --policy $pol --state-dir $out/st-node-$v --out $out/node-$v-r$r.json \
    --modes sig-pin,germline --tool echo --arguments '{"message":"hi"}' --pool 4 --calls 40 --warmup 4 \
    --gap-ms 600 bundles/out/node-everything/bundle > $out/node-$v-r$r.txt 2>&1 || echo "run failed: $out/node-$v-r$r.txt"
  echo "node $v r$r: $(grep -E '^(sig-pin|germline) ' $out/node-$v-r$r.txt | tr -s ' ' | cut -d' ' -f1-4 | tr '\n' '|')"
done; done
echo "== mcp-server-time (issue 30) bench-ab, 2 rounds"
bash scripts/bench-ab.sh $BASE_DIR/germline $NEW_DIR/germline $out/ab 2
echo "== done $(date)"
