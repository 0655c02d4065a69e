#!/usr/bin/env bash
# Load benchmark of `kanon serve` against an independent ceiling (issue 9).
#
# The ceiling is crates/kanon-ceiling: a minimal hyper 1 + rustls (ring) server, written for this
# benchmark and sharing no code with kanon, that parses each review into a serde_json::Value and
# answers it allowed with its uid. In one run, for each configuration of kanon
#
#   empty          an empty policy directory
#   100 plaintext  100 ClusterOverridePolicies, 10 of them select the Pod (each a plaintext add)
#   100 labels     the same, each of the 10 adding its label with a `labels` template
#   1,000 labels   1,000 policies, 10 matching, labels template
#   10,000 labels  10,000 policies, 10 matching, labels template
#   100 CEL mutate 100 ClusterOverridePolicies, 10 of them select the Pod, each a CEL JSONPatch
#                  mutation adding its label (POST /mutate)
#   100 CEL validate  100 ClusterValidatePolicies, 10 of them select the Pod, each the CEL
#                  memory-limit rule (POST /validate, a Pod whose containers have limits)
#
# a fresh kanon and a fresh ceiling are started side by side and driven in turn, ROUNDS times
# (the order swapped every round, so drift and noise hit both), each with
#   - saturation: wrk, 1 thread, 32 keep-alive connections, HTTP/1.1, POSTing
#     fixtures/admission-reviews/pod-create.json to /mutate?timeout=10s (req/s);
#   - a fixed 1,000 req/s: oha -q 1000 --latency-correction (an open-loop schedule: a late
#     answer delays the measurement of the requests behind it), 32 connections (p50, p99).
# It prints a Markdown table: the medians over the rounds, kanon/ceiling per configuration
# (median of the per-round ratios), kanon's peak RSS (VmHWM) per configuration.
#
#   scripts/load-bench.sh [SECONDS] [ROUNDS]     (default 10 s per measurement, 3 rounds)
#   LOAD_BENCH_CONFIGS="plain100 labels100" scripts/load-bench.sh 6 3     (some configurations)
#
# Needs wrk (Debian's; installed with apt-get when missing and run as root) and oha (crates.io;
# installed into target/bench-tools when missing: a few minutes, once). Both servers are release
# builds. The client shares the machine's cores with the server: run it on an otherwise idle
# machine (the load average is printed before and after).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
rounds=${2:-3}
fixture=fixtures/admission-reviews/pod-create.json
[ -f "$fixture" ] || { echo "error: $fixture not found (run from a checkout of the repository)" >&2; exit 2; }

if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing wrk (apt-get)" >&2
    apt-get install -y -q wrk >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null; }
  else
    echo "error: wrk is not installed (apt-get install wrk)" >&2; exit 2
  fi
fi
oha=$(command -v oha || true)
if [ -z "$oha" ]; then
  oha=$PWD/target/bench-tools/bin/oha
  if [ ! -x "$oha" ]; then
    echo "installing oha into target/bench-tools (cargo install, once)" >&2
    cargo install -q oha --locked --root target/bench-tools
  fi
fi

cargo build --release -q -p kanon -p kanon-ceiling
kanon=$PWD/target/release/kanon
ceiling=$PWD/target/release/kanon-ceiling
work=$(mktemp -d)
kanon_pid= ceiling_pid=
stop() { # pid
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
trap 'stop "$kanon_pid"; stop "$ceiling_pid"; rm -rf "$work"' EXIT

# N policies: 10 select every Pod (v1/Pod), the rest select other kinds, spread over 168
# apiVersion/kind pairs. ClusterOverridePolicies adding a label each (plaintext, a `labels`
# template or a CEL JSONPatch mutation), or ClusterValidatePolicies with the CEL memory-limit
# rule (cel-validate).
make_policies() { # dir count plaintext|labels|cel-mutate|cel-validate
  python3 - "$@" <<'PY'
import os, sys
d, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
kinds = [("apps/v1", k) for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")] + \
        [("v1", k) for k in ("ConfigMap", "Service", "Secret", "ServiceAccount")] + \
        [(f"g{i}.example.com/v1", f"Thing{j}") for i in range(40) for j in range(4)]
# 500 policies per file: one YAML file holds at most 10,000 documents.
for i in range(n):
    if i % 500 == 0:
        f = open(os.path.join(d, f"policies-{i // 500:03}.yaml"), "w")
    api, kind = ("v1", "Pod") if i < 10 else kinds[i % len(kinds)]
    if mode == "cel-validate":
        f.write(f"""---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {{name: p{i:05d}}}
spec:
  resourceSelectors: [{{apiVersion: "{api}", kind: {kind}}}]
  validateRules:
  - targetOperations: [CREATE, UPDATE]
    cel:
      validations:
      - expression: "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)"
        message: every container needs a memory limit
""")
        continue
    if mode == "plaintext":
        overriders = f"""plaintext:
      - {{op: add, path: /metadata/labels/bench-p{i}, value: "v{i}"}}"""
    elif mode == "cel-mutate":
        overriders = (
            "cel:\n        mutations:\n        - patchType: JSONPatch\n          jsonPatch:\n"
            f"            expression: \"[JSONPatch{{op: 'add', path: '/metadata/labels/bench-p{i}', value: 'v{i}'}}]\"")
    else:
        overriders = f"""template: {{type: labels, operation: add, path: bench-p{i}, value: {{string: "v{i}"}}}}"""
    f.write(f"""---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {{name: p{i:05d}}}
spec:
  resourceSelectors: [{{apiVersion: "{api}", kind: {kind}}}]
  overrideRules:
  - overriders:
      {overriders}
""")
PY
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() { # url pid what
  for _ in $(seq 1200); do
    [ "$(curl -sk "$1" -o /dev/null -w '%{http_code}' 2>/dev/null)" = 200 ] && return 0
    kill -0 "$2" 2>/dev/null || { echo "error: $3 exited" >&2; exit 1; }
    sleep 0.1
  done
  echo "error: $3 not ready after 120 s" >&2; exit 1
}

cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("KANON_BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
-- Any answer but 200 makes the run invalid.
local bad = 0
function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
function done(summary, latency, requests)
  io.write(string.format("non200 %d errors %d\n", bad,
    summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout))
end
LUA

saturate() { # url out body
  KANON_BENCH_BODY=$3 wrk -t1 -c32 -d"${seconds}s" --latency -s "$work/post.lua" "$1" >"$2"
}
fixed_rate() { # url out body
  "$oha" --no-tui --insecure --http-version 1.1 -m POST -H 'Content-Type: application/json' \
    -D "$3" --output-format json -c 32 -q 1000 --latency-correction --wait-ongoing-requests-after-deadline -z "${seconds}s" "$1" >"$2"
}


# LOAD_BENCH_CONFIGS="plain100 labels100" measures only those (e.g. to compare two commits).
read -r -a configs <<<"${LOAD_BENCH_CONFIGS:-empty plain100 labels100 labels1000 labels10000 cel100 celvalidate100}"
mkdir -p "$work/empty"
make_policies "$work/plain100" 100 plaintext
make_policies "$work/labels100" 100 labels
make_policies "$work/labels1000" 1000 labels
make_policies "$work/labels10000" 10000 labels
make_policies "$work/cel100" 100 cel-mutate
make_policies "$work/celvalidate100" 100 cel-validate
# The memory-limit rule's Pod: the fixture with a memory limit on every container.
python3 - "$fixture" "$work/pod-limited.json" <<'PY'
import json, sys
review = json.load(open(sys.argv[1]))
for container in review["request"]["object"]["spec"]["containers"]:
    container.setdefault("resources", {}).setdefault("limits", {})["memory"] = "128Mi"
json.dump(review, open(sys.argv[2], "w"))
PY

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $seconds s per measurement, $rounds rounds" >&2
for config in "${configs[@]}"; do
  kport=$(free_port); mport=$(free_port); cport=$(free_port)
  "$kanon" serve --policies "$work/$config" --cert-dir "$work/certs" --listen "127.0.0.1:$kport" \
    --metrics-listen "127.0.0.1:$mport" 2>"$work/$config.kanon.log" &
  kanon_pid=$!
  "$ceiling" "127.0.0.1:$cport" >"$work/$config.ceiling.log" &
  ceiling_pid=$!
  wait_ready "https://127.0.0.1:$kport/readyz" "$kanon_pid" kanon
  wait_ready "https://127.0.0.1:$cport/" "$ceiling_pid" kanon-ceiling
  endpoint=mutate body=$fixture
  if [ "$config" = celvalidate100 ]; then endpoint=validate body=$work/pod-limited.json; fi
  declare -A url=([kanon]="https://127.0.0.1:$kport/$endpoint?timeout=10s"
                  [ceiling]="https://127.0.0.1:$cport/$endpoint?timeout=10s")
  # Every kanon answer must be the full mutation (10 labels) or, with no policy or validate
  # policies only, a plain allow.
  curl -sk -H 'Content-Type: application/json' --data-binary "@$body" "${url[kanon]}" >"$work/$config.answer.json"
  for server in ceiling kanon; do  # warm-up
    KANON_BENCH_BODY=$body wrk -t1 -c32 -d2s -s "$work/post.lua" "${url[$server]}" >/dev/null
  done
  for round in $(seq "$rounds"); do
    order=(ceiling kanon); [ $((round % 2)) = 0 ] && order=(kanon ceiling)
    for server in "${order[@]}"; do
      echo "  $config round $round: $server at saturation" >&2
      saturate "${url[$server]}" "$work/$config.$round.$server.wrk" "$body"
    done
    for server in "${order[@]}"; do
      echo "  $config round $round: $server at 1,000 req/s" >&2
      fixed_rate "${url[$server]}" "$work/$config.$round.$server.oha.json" "$body"
    done
  done
  awk '/VmHWM/ {print $2}' "/proc/$kanon_pid/status" >"$work/$config.kanon.rss"
  awk '/VmHWM/ {print $2}' "/proc/$ceiling_pid/status" >"$work/$config.ceiling.rss"
  stop "$kanon_pid"; kanon_pid=
  stop "$ceiling_pid"; ceiling_pid=
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$work" "$rounds" "${configs[@]}" <<'PY'
import base64, json, re, statistics, sys
work, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
titles = {"empty": "empty policy dir", "plain100": "100 COPs, plaintext",
          "labels100": "100 COPs, labels template", "labels1000": "1,000 COPs, labels template",
          "labels10000": "10,000 COPs, labels template",
          "cel100": "100 COPs, CEL JSONPatch", "celvalidate100": "100 CVPs, CEL memory-limit rule"}
targets = {"empty": "≥ 0.9", "plain100": "≥ 0.8", "labels100": "≥ 0.7",
           "labels1000": "≥ 0.7, within 10% of 100", "labels10000": "≥ 0.7, within 10% of 100",
           "cel100": "≥ 0.8, p99 ≤ 1 ms", "celvalidate100": "≥ 0.8, p99 ≤ 1 ms"}

def wrk(path):
    text = open(path).read()
    m = re.search(r"non200 (\d+) errors (\d+)", text)
    if not m or m.group(1) != "0" or m.group(2) != "0":
        sys.exit(f"error: {path}: answers other than 200, or socket errors:\n{text}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))

def oha(path):
    d = json.load(open(path))
    codes = d.get("statusCodeDistribution", {})
    if set(codes) != {"200"} or d.get("errorDistribution"):
        sys.exit(f"error: {path}: answers other than 200, or errors: {codes} {d.get('errorDistribution')}")
    p = d["latencyPercentiles"]
    return p["p50"] * 1000, p["p99"] * 1000, d["summary"]["requestsPerSec"]

def med(xs): return statistics.median(xs)

print("| configuration | ceiling req/s | kanon req/s | kanon / ceiling (median; rounds) | target "
      "| ceiling p50 / p99 at 1,000/s | kanon p50 / p99 at 1,000/s | kanon peak RSS |")
print("|---|---|---|---|---|---|---|---|")
kanon_rps = {}
for c in configs:
    rps = {s: [wrk(f"{work}/{c}.{r}.{s}.wrk") for r in range(1, rounds + 1)] for s in ("ceiling", "kanon")}
    lat = {s: [oha(f"{work}/{c}.{r}.{s}.oha.json") for r in range(1, rounds + 1)] for s in ("ceiling", "kanon")}
    ratios = [k / c_ for k, c_ in zip(rps["kanon"], rps["ceiling"])]
    kanon_rps[c] = med(rps["kanon"])
    rss = int(open(f"{work}/{c}.kanon.rss").read()) / 1024
    answer = json.load(open(f"{work}/{c}.answer.json"))["response"]
    patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    if not answer.get("allowed") or len(patch) != (0 if c in ("empty", "celvalidate100") else 10):
        sys.exit(f"error: kanon's answer in {c} is not the expected one: {answer} {patch}")
    def latency(s):
        return f"{med([l[0] for l in lat[s]]):.2f} / {med([l[1] for l in lat[s]]):.2f} ms"
    print(f"| {titles[c]} | {med(rps['ceiling']):,.0f} | {med(rps['kanon']):,.0f} "
          f"| **{med(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)}) | {targets[c]} "
          f"| {latency('ceiling')} | {latency('kanon')} | {rss:.1f} MiB |")
if "labels100" in kanon_rps:
    for c in ("labels1000", "labels10000"):
        if c in kanon_rps:
            print(f"\n{titles[c]}: kanon req/s / 100 COPs labels template = "
                  f"{kanon_rps[c] / kanon_rps['labels100']:.2f}", end="")
    print()
PY
