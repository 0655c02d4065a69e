#!/usr/bin/env bash
# Load benchmark of `kanon serve` (issue 4): kanon with 100 and 1,000 policies (10 of them
# matching the Pod) and, as the ceiling, the same server answering allow-all without
# evaluating; each driven by oha over HTTP/1.1 keep-alive with a real AdmissionReview body.
# Reports throughput at saturation, p50/p99 at a fixed 1,000 requests/s, and peak RSS.
#
#   scripts/load-bench.sh [SECONDS]      (default 10 s per run; needs oha: cargo install oha)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
command -v oha >/dev/null || { echo "error: oha is not installed (cargo install oha --locked)" >&2; exit 2; }
fixture=fixtures/admission-reviews/pod-create.json
[ -f "$fixture" ] || { echo "error: $fixture not found (run from a checkout of the repository)" >&2; exit 2; }

cargo build --release -q -p kanon
kanon=target/release/kanon
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# N ClusterOverridePolicies: 10 select every Pod (v1/Pod) and each adds a label; the rest
# select other kinds, spread over many apiVersion/kind pairs.
make_policies() { # dir count
  python3 - "$1" "$2" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
kinds = [("apps/v1", k) for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")] + \
        [("v1", k) for k in ("ConfigMap", "Service", "Secret", "ServiceAccount")] + \
        [(f"g{i}.example.com/v1", f"Thing{j}") for i in range(40) for j in range(4)]
with open(os.path.join(d, "policies.yaml"), "w") as f:
    for i in range(n):
        api, kind = ("v1", "Pod") if i < 10 else kinds[i % len(kinds)]
        f.write(f"""---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {{name: p{i:05d}}}
spec:
  resourceSelectors: [{{apiVersion: "{api}", kind: {kind}}}]
  overrideRules:
  - overriders:
      plaintext:
      - {{op: add, path: /metadata/labels/bench.kanon.dev~1p{i}, value: "x"}}
""")
PY
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_case() { # name policies-dir extra-args...
  local name=$1 dir=$2; shift 2
  local https metrics
  https=$(port); metrics=$(port)
  "$kanon" serve --policies "$dir" --cert-dir "$work/certs" --listen "127.0.0.1:$https" \
    --metrics-listen "127.0.0.1:$metrics" "$@" 2>"$work/$name.log" &
  pid=$!
  for _ in $(seq 100); do
    curl -sk "https://127.0.0.1:$https/readyz" -o /dev/null -w '%{http_code}' 2>/dev/null | grep -q 200 && break
    sleep 0.1
  done
  local url="https://127.0.0.1:$https/mutate?timeout=10s"
  local common=(--no-tui --insecure --http-version 1.1 -m POST -H 'Content-Type: application/json' -D "$fixture" --output-format json)
  oha "${common[@]}" -z 2s -c 16 "$url" >/dev/null          # warm up
  oha "${common[@]}" -z "${seconds}s" -c 16 "$url" >"$work/$name-max.json"
  oha "${common[@]}" -z "${seconds}s" -c 16 -q 1000 "$url" >"$work/$name-1000.json"
  local rss
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
  python3 - "$name" "$work/$name-max.json" "$work/$name-1000.json" "$rss" <<'PY'
import json, sys
name, sat, fixed, rss = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
def ms(v): return f"{v*1000:.2f} ms"
codes = {**sat.get("statusCodeDistribution", {}), **fixed.get("statusCodeDistribution", {})}
print(f"| {name} | {sat['summary']['requestsPerSec']:.0f} | {ms(sat['latencyPercentiles']['p50'])} | {ms(sat['latencyPercentiles']['p99'])} "
      f"| {fixed['summary']['requestsPerSec']:.0f} | {ms(fixed['latencyPercentiles']['p50'])} | {ms(fixed['latencyPercentiles']['p99'])} "
      f"| {rss/1024:.1f} MiB | {codes} |")
PY
}

make_policies "$work/p100" 100
make_policies "$work/p1000" 1000
mkdir -p "$work/none"
echo "| server | req/s at saturation (16 conns) | p50 | p99 | req/s at fixed 1,000/s | p50 | p99 | peak RSS | HTTP codes |"
echo "|---|---|---|---|---|---|---|---|---|"
run_case "allow-all ceiling" "$work/none" --allow-all
run_case "kanon, 100 policies" "$work/p100"
run_case "kanon, 1,000 policies" "$work/p1000"
