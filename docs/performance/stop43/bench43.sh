#!/usr/bin/env bash
# Quiet-machine A/B for stop 43: BASE (main 3596e07, stop 42, with mcp-server-git's manifest of
# that commit repacked from the same image: BASE_BUNDLE) against NEW (this branch, the shipped
# bundle whose reading tools are read-only), release builds, alternated.
#   BASE_DIR=/var/tmp/germline-release-base/release NEW_DIR=/var/tmp/germline-release-new/release \
#   BASE_BUNDLE=/var/tmp/gitbase/bundle bash docs/performance/stop43/bench43.sh OUT [ROUNDS]
# BASE_BUNDLE: git show 3596e07:bundles/servers/mcp-server-git/manifest.json > M, then
#   germline release pack --manifest M --from-image bundles/out/mcp-server-git/image \
#     --key bundles/out/keys/cosign.key --out $BASE_BUNDLE --image ${BASE_BUNDLE%/*}/image
# (stop 42's binary refuses the new manifest's `read_only`, an unknown field to it).
# The git bench repository and policy are those of docs/performance/stop41/bench41.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
out=${1:-/var/tmp/bench43}; rounds=${2:-4}; mkdir -p $out
key=$root/bundles/out/keys/cosign.pub
new_bundle=$root/bundles/out/mcp-server-git/bundle
d=/tmp/germline-bench-git
if [ ! -d $d/repo ]; then
  rm -rf $d; mkdir -p $d/repo/src; (cd $d/repo
  git init -q -b main; git config user.name A; git config user.email a@example.com
  echo hello > README; echo 'fn main() {}' > src/main.rs; git add .; git commit -q -m first; echo more >> README)
  printf '[labels]\nfinance = "invoices"\n\n[[item]]\npath = "%s/repo/**"\nlabel = []\n\n[[argument]]\ntool = "git_*"\nname = "*"\nlabel = []\n\n[consumers]\nagent = ["finance"]\n' $d > $d/policy.toml
fi
echo "== load $(uptime)"
echo "== git_status (issue 27): sig-pin (the persistent server) and germline pool 2 in each run; base and new alternated; 100 calls at 20 ms"
for r in $(seq 1 $rounds); do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; bun=$BASE_BUNDLE; else b=$NEW_DIR; bun=$new_bundle; fi
  rm -rf $out/st-git-$v
  $b/germline run-bench --quiet --key $key --policy $d/policy.toml \
    --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" --modes sig-pin,germline \
    --pool 2 --calls 100 --warmup 20 --gap-ms 20 --state-dir $out/st-git-$v --out $out/git-$v-r$r.json \
    $bun > $out/git-$v-r$r.txt 2>&1 || echo "run failed: $out/git-$v-r$r.txt"
  echo "git $v r$r: $(grep -E '^(sig-pin|germline) ' $out/git-$v-r$r.txt | tr -s ' ' | cut -d' ' -f1-5 | tr '\n' '|') load $(cut -d' ' -f1 /proc/loadavg)"
done; done
echo "== git_status in process (phases --cpu, release), base and new alternated, pool 2, 100 calls at 20 ms"
for r in 1 2; do for v in base new; do
  if [ $v = base ]; then b=$BASE_DIR; bun=$BASE_BUNDLE; else b=$NEW_DIR; bun=$new_bundle; fi
  rm -rf $out/st-ph-$v; mkdir -p $out/st-ph-$v
  $b/examples/phases --policy $d/policy.toml --key $key --pool 2 --state-dir $out/st-ph-$v \
    $bun --tool git_status --arguments "{\"repo_path\":\"$d/repo\"}" \
    --calls 100 --warmup 20 --gap-ms 20 --cpu > $out/git-phases-$v-r$r.txt 2>&1 || echo "phases failed: $out/git-phases-$v-r$r.txt"
  echo "phases $v r$r: $(grep -E 'handle p50| copy.mcp |session.meta|writes.commit' $out/git-phases-$v-r$r.txt | tr -s ' ' | tr '\n' '|')"
done; done
echo "== pack --from pypi:mcp-server-git (new, release, caches warm), twice"
for i in 1 2; do
  rm -rf $out/pack; mkdir -p $out/pack; chmod 755 $out/pack
  s=$(date +%s.%N)
  COSIGN_PASSWORD=germline-example-test-key $NEW_DIR/germline release pack --json \
    --from pypi:mcp-server-git==2026.10.19 --include /usr/bin/git \
    --rootfs-hook bundles/servers/mcp-server-git/rootfs-hook \
    --key bundles/out/keys/cosign.key --out $out/pack/bundle --image $out/pack/image \
    --manifest $out/pack/draft.json > $out/pack-$i.json 2> $out/pack-$i.err || echo "pack failed: $out/pack-$i.err"
  echo "pack $i: $(echo "$(date +%s.%N) - $s" | bc) s; read_only drafted: $(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sorted(k for k,t in m['tools'].items() if t.get('read_only')))" $out/pack/draft.json)"
done
echo "== done $(date)"
