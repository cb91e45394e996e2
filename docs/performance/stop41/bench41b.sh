#!/usr/bin/env bash
# Stop 41's second quiet pass on the final main (cc52825): Node echo and git_status, base and new alternated.
set -euo pipefail
cd /work/main
out=/var/tmp/bench41; key=$PWD/bundles/out/keys/cosign.pub; pol=$PWD/config/policy.example.toml; d=/tmp/germline-bench-git
echo "== load $(uptime)"
for r in 4 5 6; do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; else b=$NEW_DIR; fi
  $b/germline run-bench --quiet --key $key --policy $pol --state-dir $out/st-node-$v --out $out/nodeF-$v-r$r.json \
    --modes sig-pin,germline --tool echo --arguments '{"message":"hi"}' --pool 4 --calls 40 --warmup 4 \
    --gap-ms 600 bundles/out/node-everything/bundle > $out/nodeF-$v-r$r.txt 2>&1 || echo "run failed: $out/nodeF-$v-r$r.txt"
  $b/germline run-bench --quiet --key $key --policy $d/policy.toml \
    --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" --modes sig-pin,germline \
    --pool 2 --calls 100 --warmup 20 --gap-ms 20 --state-dir $out/st-git-$v --out $out/gitF-$v-r$r.json \
    bundles/out/mcp-server-git/bundle > $out/gitF-$v-r$r.txt 2>&1 || echo "run failed: $out/gitF-$v-r$r.txt"
  echo "$v r$r done $(date +%T)"
done; done
