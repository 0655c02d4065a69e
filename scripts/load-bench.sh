#!/usr/bin/env bash
# Load benchmark of `kanon serve` against an independent ceiling (issue 9).
#
# The ceiling is crates/kanon-ceiling: a minimal hyper 1 + rustls (ring) server, written for this
# benchmark and sharing no code with kanon, that parses each review into a serde_json::Value and
# answers it allowed with its uid. In one run, for each configuration of kanon
#
#   empty             an empty policy directory
#   plainN            N ClusterOverridePolicies, each a plaintext add of its own label
#   labelsN           the same, each adding its label with a `labels` template
#   celN              the same, each a CEL JSONPatch mutation (POST /mutate)
#   celapplyN         the same, each a CEL ApplyConfiguration mutation
#   conditionN        N ClusterValidatePolicies, each a template condition the Pod meets
#                     (POST /validate, a Pod whose containers have memory limits)
#   programN          the same, each a validate program
#   celvalidateN      the same, each the CEL memory-limit rule with a message
#   celmessageN       the same rule with a messageExpression
#   vapN / mapN       N ValidatingAdmissionPolicies (the memory-limit rule, messageExpression)
#                     or MutatingAdmissionPolicies (a JSONPatch label), each with its binding,
#                     served from the policy directory as kanon serve --policies reads them
#   In every configuration 10 policies select the Pod; of the others, half select Pods by a
#   name the Pod does not have (resourceNames for admission policies), half another kind.
#   By default N is 100 for each language, and 1,000 and 10,000 for labels and celvalidate.
#   CONFIG-traceN     CONFIG's policies with OpenTelemetry traces exported for N% of the reviews
#                  (celvalidate100-trace1 and celvalidate100-trace100 by default): kanon started
#                  with --otlp-endpoint --otlp-protocol http/protobuf --trace-sampling-ratio N/100,
#                  exporting to an OTLP/HTTP sink started beside it (a Python server on
#                  127.0.0.1 that reads each POST /v1/traces and answers 200, empty); at the end
#                  kanon's kanon_trace_spans_{exported,dropped,failed}_total are read from its
#                  metrics port, after the queue's 5 s batch delay
#
# a fresh kanon and a fresh ceiling are started side by side and driven in turn, ROUNDS times
# (the order swapped every round, so drift and noise hit both), each with
#   - saturation: wrk, 1 thread, 32 keep-alive connections, HTTP/1.1, POSTing
#     fixtures/admission-reviews/pod-create.json to /mutate?timeout=10s (req/s);
#   - a fixed 1,000 req/s: oha -q 1000 --latency-correction (an open-loop schedule: a late
#     answer delays the measurement of the requests behind it), 32 connections (p50, p99).
# It prints a Markdown table: the medians over the rounds, kanon/ceiling per configuration
# (median of the per-round ratios), kanon's peak RSS (VmHWM) per configuration, and for traced
# configurations the spans exported and dropped. Below the table: kanon's CPU time per review
# answered in each configuration (all of its measurements and warm-ups together: a figure the
# machine's other load moves less than req/s), and a line per traced configuration (reviews
# kanon answered, spans failed, what the sink received and its CPU time: the sink shares the 2
# cores with kanon, the ceiling and the client).
#
#   scripts/load-bench.sh [SECONDS] [ROUNDS]     (default 10 s per measurement, 3 rounds)
#   LOAD_BENCH_CONFIGS="plain100 labels100" scripts/load-bench.sh 6 3     (some configurations)
#   LOAD_BENCH_BASELINE=/path/to/an/older/kanon scripts/load-bench.sh 5 3   (before and after)
#
# With LOAD_BENCH_BASELINE, a second kanon binary (another build, say of an earlier commit) is
# started beside them in each configuration and driven at saturation in the same rounds; below
# the table, its kanon / ceiling and this build's, per configuration, in the same run.
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
kanon_pid='' ceiling_pid='' sink_pid='' baseline_pid=''
baseline=${LOAD_BENCH_BASELINE:-}
if [ -n "$baseline" ] && [ ! -x "$baseline" ]; then
  echo "error: LOAD_BENCH_BASELINE=$baseline is not an executable" >&2; exit 2
fi
stop() { # pid
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
trap 'stop "$kanon_pid"; stop "$ceiling_pid"; stop "$sink_pid"; stop "$baseline_pid"; rm -rf "$work"' EXIT

# N policies: 10 select every Pod (v1/Pod), the rest select other kinds, spread over 168
# apiVersion/kind pairs. ClusterOverridePolicies adding a label each (plaintext, a `labels`
# template or a CEL JSONPatch mutation), or ClusterValidatePolicies with the CEL memory-limit
# rule (cel-validate).
make_policies() { # dir count MODE (see the header)
  python3 - "$@" <<'PY'
import os, sys
d, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
kinds = [("apps/v1", k) for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")] + \
        [("v1", k) for k in ("ConfigMap", "Service", "Secret", "ServiceAccount")] + \
        [(f"g{i}.example.com/v1", f"Thing{j}") for i in range(40) for j in range(4)]

def target(i):
    """The first 10 select the Pod; of the others, half select Pods by a name the Pod does not
    have, half another kind."""
    if i < 10:
        return "v1", "Pod", None
    if i % 2 == 0:
        return "v1", "Pod", f"other-{i}"
    api, kind = kinds[i % len(kinds)]
    return api, kind, None

def selector(i):
    api, kind, name = target(i)
    return f'{{apiVersion: "{api}", kind: {kind}' + (f", name: {name}}}" if name else "}")

def resource_rule(i):
    """The same choice as `selector`, as an admission policy's resourceRules."""
    api, kind, name = target(i)
    group, _, version = api.rpartition("/")
    names = f"\n      resourceNames: [{name}]" if name else ""
    return (f"- apiGroups: [\"{group}\"]\n      apiVersions: [{version}]\n"
            f"      operations: [CREATE, UPDATE]\n      resources: [{kind.lower()}s]{names}")

LIMITS = "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)"
# 500 policies per file: one YAML file holds at most 10,000 documents.
for i in range(n):
    if i % 500 == 0:
        f = open(os.path.join(d, f"policies-{i // 500:03}.yaml"), "w")
    if mode in ("vap", "map"):
        if mode == "vap":
            kind, version, binding = "ValidatingAdmissionPolicy", "v1", "  validationActions: [Deny]\n"
            body = f"""  validations:
  - expression: "{LIMITS}"
    messageExpression: "'container without a memory limit in ' + object.metadata.name"
"""
        else:
            kind, version, binding = "MutatingAdmissionPolicy", "v1beta1", ""
            body = f"""  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[JSONPatch{{op: 'add', path: '/metadata/labels/bench-p{i}', value: 'v{i}'}}]"
"""
        f.write(f"""---
apiVersion: admissionregistration.k8s.io/{version}
kind: {kind}
metadata: {{name: p{i:05d}}}
spec:
  matchConstraints:
    resourceRules:
    {resource_rule(i)}
{body}---
apiVersion: admissionregistration.k8s.io/{version}
kind: {kind}Binding
metadata: {{name: p{i:05d}}}
spec:
  policyName: p{i:05d}
{binding}""")
        continue
    if mode in ("cel-validate", "cel-message", "condition", "program"):
        if mode == "cel-validate":
            rule = f"""cel:
      validations:
      - expression: "{LIMITS}"
        message: every container needs a memory limit"""
        elif mode == "cel-message":
            rule = f"""cel:
      validations:
      - expression: "{LIMITS}"
        messageExpression: \"'container without a memory limit in ' + object.metadata.name\""""
        elif mode == "condition":
            rule = """template:
      type: condition
      condition: {cond: NotExist, dataRef: {from: current, path: /metadata/name}, message: a Pod needs a name}"""
        else:
            rule = """program: '{"valid": {{ (object.metadata.name != "") | tojson }}}'"""
        f.write(f"""---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {{name: p{i:05d}}}
spec:
  resourceSelectors: [{selector(i)}]
  validateRules:
  - targetOperations: [CREATE, UPDATE]
    {rule}
""")
        continue
    if mode == "plaintext":
        overriders = f"""plaintext:
      - {{op: add, path: /metadata/labels/bench-p{i}, value: "v{i}"}}"""
    elif mode == "cel-mutate":
        overriders = (
            "cel:\n        mutations:\n        - patchType: JSONPatch\n          jsonPatch:\n"
            f"            expression: \"[JSONPatch{{op: 'add', path: '/metadata/labels/bench-p{i}', value: 'v{i}'}}]\"")
    elif mode == "cel-apply":
        overriders = (
            "cel:\n        mutations:\n        - patchType: ApplyConfiguration\n          applyConfiguration:\n"
            f"            expression: \"Object{{metadata: Object.metadata{{labels: {{'bench-p{i}': 'v{i}'}}}}}}\"")
    else:
        overriders = f"""template: {{type: labels, operation: add, path: bench-p{i}, value: {{string: "v{i}"}}}}"""
    f.write(f"""---
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {{name: p{i:05d}}}
spec:
  resourceSelectors: [{selector(i)}]
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

# The OTLP/HTTP sink of the traced configurations: HTTP/1.1 keep-alive, each POST's body read
# (Content-Length) and answered 200 with an empty protobuf body, nothing decoded; GET /stats
# says how many requests and bytes it took.
cat >"$work/otlp-sink.py" <<'PY'
import http.server, signal, sys, threading
lock, taken = threading.Lock(), [0, 0]
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        while n > 0:
            chunk = self.rfile.read(min(n, 1 << 20))
            if not chunk:
                return
            n -= len(chunk)
            with lock:
                taken[1] += len(chunk)
        with lock:
            taken[0] += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        with lock:
            body = f"{taken[0]} {taken[1]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
server.daemon_threads = True
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
server.serve_forever()
PY

saturate() { # url out body
  KANON_BENCH_BODY=$3 wrk -t1 -c32 -d"${seconds}s" --latency -s "$work/post.lua" "$1" >"$2"
}
fixed_rate() { # url out body
  "$oha" --no-tui --insecure --http-version 1.1 -m POST -H 'Content-Type: application/json' \
    -D "$3" --output-format json -c 32 -q 1000 --latency-correction --wait-ongoing-requests-after-deadline -z "${seconds}s" "$1" >"$2"
}


# LOAD_BENCH_CONFIGS="plain100 labels100" measures only those (e.g. to compare two commits).
# CONFIG-traceN: CONFIG's policies, N% of the reviews traced (celvalidate100-trace1, ...).
read -r -a configs <<<"${LOAD_BENCH_CONFIGS:-empty plain100 labels100 labels1000 labels10000 condition100 program100 cel100 celapply100 celvalidate100 celmessage100 celvalidate1000 celvalidate10000 vap100 map100 celvalidate100-trace1 celvalidate100-trace100}"

# What a configuration is: "COUNT MODE ENDPOINT" (MODE as make_policies takes it).
config_of() { # config (without -traceN)
  local count=${1##*[a-z]} name=${1%%[0-9]*}
  case $name in
    empty) echo "0 none mutate" ;;
    plain) echo "$count plaintext mutate" ;;
    labels) echo "$count labels mutate" ;;
    cel) echo "$count cel-mutate mutate" ;;
    celapply) echo "$count cel-apply mutate" ;;
    celvalidate) echo "$count cel-validate validate" ;;
    celmessage) echo "$count cel-message validate" ;;
    condition) echo "$count condition validate" ;;
    program) echo "$count program validate" ;;
    vap) echo "$count vap validate" ;;
    map) echo "$count map mutate" ;;
    *) return 1 ;;
  esac
}
for config in "${configs[@]}"; do
  policies=${config%-trace*}
  read -r count mode _ <<<"$(config_of "$policies")" || { echo "error: unknown configuration $config" >&2; exit 2; }
  if [ ! -d "$work/$policies" ]; then
    if [ "$mode" = none ]; then mkdir -p "$work/$policies"; else make_policies "$work/$policies" "$count" "$mode"; fi
  fi
done
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
  policies=${config%-trace*} trace=()
  read -r _ _ endpoint <<<"$(config_of "$policies")"
  if [ "$policies" != "$config" ]; then
    percent=${config##*-trace}
    if ! [[ $percent =~ ^[0-9]+$ ]] || [ "$percent" -gt 100 ]; then
      echo "error: $config: the N of -traceN is a percentage (0 to 100)" >&2; exit 2
    fi
    sport=$(free_port)
    python3 "$work/otlp-sink.py" "$sport" 2>"$work/$config.sink.log" &
    sink_pid=$!
    wait_ready "http://127.0.0.1:$sport/stats" "$sink_pid" "the OTLP sink"
    trace=(--otlp-endpoint "http://127.0.0.1:$sport" --otlp-protocol http/protobuf
           --trace-sampling-ratio "$(awk -v n="$percent" 'BEGIN { print n / 100 }')")
  fi
  "$kanon" serve --policies "$work/$policies" --cert-dir "$work/certs" --listen "127.0.0.1:$kport" \
    --metrics-listen "127.0.0.1:$mport" "${trace[@]}" 2>"$work/$config.kanon.log" &
  kanon_pid=$!
  "$ceiling" "127.0.0.1:$cport" >"$work/$config.ceiling.log" &
  ceiling_pid=$!
  wait_ready "https://127.0.0.1:$kport/readyz" "$kanon_pid" kanon
  wait_ready "https://127.0.0.1:$cport/" "$ceiling_pid" kanon-ceiling
  body=$fixture
  if [ "$endpoint" = validate ]; then body=$work/pod-limited.json; fi
  declare -A url=([kanon]="https://127.0.0.1:$kport/$endpoint?timeout=10s"
                  [ceiling]="https://127.0.0.1:$cport/$endpoint?timeout=10s")
  saturated=(ceiling kanon)
  if [ -n "$baseline" ]; then
    bport=$(free_port); bmport=$(free_port)
    "$baseline" serve --policies "$work/$policies" --cert-dir "$work/certs-baseline" \
      --listen "127.0.0.1:$bport" --metrics-listen "127.0.0.1:$bmport" "${trace[@]}" \
      2>"$work/$config.baseline.log" &
    baseline_pid=$!
    wait_ready "https://127.0.0.1:$bport/readyz" "$baseline_pid" "the baseline kanon"
    url[baseline]="https://127.0.0.1:$bport/$endpoint?timeout=10s"
    saturated=(ceiling kanon baseline)
  fi
  # Every kanon answer must be the full mutation (10 labels) or, with no policy or validate
  # policies only, a plain allow.
  curl -sk -H 'Content-Type: application/json' --data-binary "@$body" "${url[kanon]}" >"$work/$config.answer.json"
  for server in "${saturated[@]}"; do  # warm-up
    KANON_BENCH_BODY=$body wrk -t1 -c32 -d2s -s "$work/post.lua" "${url[$server]}" >/dev/null
  done
  for round in $(seq "$rounds"); do
    order=(ceiling kanon); [ $((round % 2)) = 0 ] && order=(kanon ceiling)
    for server in "${order[@]}" ${baseline:+baseline}; do
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
  # CPU time (utime + stime), in clock ticks, since the process started.
  awk '{print $14 + $15}' "/proc/$kanon_pid/stat" >"$work/$config.kanon.cpu"
  if [ -n "$sink_pid" ]; then
    # The last batch waits up to the queue's 5 s delay before it is exported.
    sleep 6
    curl -sf "http://127.0.0.1:$sport/stats" >"$work/$config.sink.stats"
    awk '{print $14 + $15}' "/proc/$sink_pid/stat" >"$work/$config.sink.cpu"
  fi
  curl -sf "http://127.0.0.1:$mport/metrics" >"$work/$config.kanon.metrics"
  stop "$kanon_pid"; kanon_pid=
  stop "$ceiling_pid"; ceiling_pid=
  stop "$sink_pid"; sink_pid=
  stop "$baseline_pid"; baseline_pid=
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$work" "$rounds" "$(getconf CLK_TCK)" "${configs[@]}" <<'PY'
import base64, json, re, statistics, sys
work, rounds, tck, configs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
modes = {"plain": "COPs, plaintext", "labels": "COPs, labels template",
         "cel": "COPs, CEL JSONPatch", "celapply": "COPs, CEL ApplyConfiguration",
         "celvalidate": "CVPs, CEL memory-limit rule", "celmessage": "CVPs, CEL rule with messageExpression",
         "condition": "CVPs, template condition", "program": "CVPs, program",
         "vap": "ValidatingAdmissionPolicies (with bindings)", "map": "MutatingAdmissionPolicies (with bindings), JSONPatch"}
mutating = {"plain", "labels", "cel", "celapply", "map"}

def name(c): return re.sub(r"\d+$", "", c)
def count(c): return int(re.search(r"(\d+)$", c).group(1)) if re.search(r"\d+$", c) else 0
def titles(c):
    return "empty policy dir" if c == "empty" else f"{count(c):,} {modes[name(c)]}"
def targets(c):
    if c == "empty" or count(c) == 100:
        return "≥ 0.9, p99 ≤ 1 ms"
    return "within 10% of 100, p99 ≤ 1 ms"

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

def base(c): return c.split("-trace")[0]
def percent(c): return int(c.split("-trace")[1]) if "-trace" in c else None
def title(c):
    return titles(base(c)) + (f", {percent(c)}% traced" if percent(c) is not None else "")

def metric(text, name):  # the sum over a family's series, 0 when absent
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

traced = [c for c in configs if percent(c) is not None]
spans = {}
for c in traced:
    text = open(f"{work}/{c}.kanon.metrics").read()
    requests, received = map(int, open(f"{work}/{c}.sink.stats").read().split())
    spans[c] = {"exported": metric(text, "kanon_trace_spans_exported_total"),
                "dropped": metric(text, "kanon_trace_spans_dropped_total"),
                "failed": metric(text, "kanon_trace_spans_failed_total"),
                "reviews": metric(text, "kanon_admission_requests_total"),
                "posts": requests, "bytes": received,
                "cpu": int(open(f"{work}/{c}.sink.cpu").read()) / tck}

print("| configuration | ceiling req/s | kanon req/s | kanon / ceiling (median; rounds) | target "
      "| ceiling p50 / p99 at 1,000/s | kanon p50 / p99 at 1,000/s | kanon peak RSS |"
      + (" spans exported / dropped |" if traced else ""))
print("|---|---|---|---|---|---|---|---|" + ("---|" if traced else ""))
kanon_rps, kanon_ratio = {}, {}
for c in configs:
    rps = {s: [wrk(f"{work}/{c}.{r}.{s}.wrk") for r in range(1, rounds + 1)] for s in ("ceiling", "kanon")}
    lat = {s: [oha(f"{work}/{c}.{r}.{s}.oha.json") for r in range(1, rounds + 1)] for s in ("ceiling", "kanon")}
    ratios = [k / c_ for k, c_ in zip(rps["kanon"], rps["ceiling"])]
    kanon_rps[c], kanon_ratio[c] = med(rps["kanon"]), med(ratios)
    rss = int(open(f"{work}/{c}.kanon.rss").read()) / 1024
    answer = json.load(open(f"{work}/{c}.answer.json"))["response"]
    patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    # The 10 selecting policies' labels, no other policy's; a CEL mutation's patch may also
    # carry what the apiserver's defaulting adds between mutations.
    added = set()
    for op in patch:
        if op.get("op") == "add" and op.get("path", "").startswith("/metadata/labels/"):
            added.add(op["path"].split("/")[-1])
        elif op.get("op") == "add" and op.get("path") == "/metadata/labels":
            added.update(op.get("value", {}))
    added = {k for k in added if k.startswith("bench-p")}
    wanted = {f"bench-p{i}" for i in range(10)} if name(base(c)) in mutating else set()
    if not answer.get("allowed") or added != wanted or (not wanted and patch):
        sys.exit(f"error: kanon's answer in {c} is not the expected one: {answer} {patch}")
    def latency(s):
        return f"{med([l[0] for l in lat[s]]):.2f} / {med([l[1] for l in lat[s]]):.2f} ms"
    target = "—" if percent(c) is not None else targets(c)
    exported = ""
    if traced:
        exported = (f" {spans[c]['exported']:,.0f} / {spans[c]['dropped']:,.0f} |" if c in spans else " — |")
    print(f"| {title(c)} | {med(rps['ceiling']):,.0f} | {med(rps['kanon']):,.0f} "
          f"| **{med(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)}) | {target} "
          f"| {latency('ceiling')} | {latency('kanon')} | {rss:.1f} MiB |{exported}")
for c in configs:
    hundred = re.sub(r"\d+$", "100", c)
    if count(c) > 100 and hundred in kanon_rps:
        print(f"\n{titles(c)}: kanon req/s / {titles(hundred)} = {kanon_rps[c] / kanon_rps[hundred]:.2f}", end="")
print()
for c in traced:
    t = spans[c]
    made = t["exported"] + t["dropped"] + t["failed"]
    print(f"\n{title(c)}: {t['reviews']:,.0f} reviews answered, {made:,.0f} spans ended "
          f"({made / max(t['reviews'], 1):.2f} a review): {t['exported']:,.0f} exported, "
          f"{t['dropped']:,.0f} dropped, {t['failed']:,.0f} failed; the sink took "
          f"{t['posts']:,} POSTs, {t['bytes'] / 2**20:,.1f} MiB, {t['cpu']:.1f} s of CPU", end="")
    if base(c) in kanon_rps:
        print(f"; against untraced, kanon req/s {kanon_rps[c] / kanon_rps[base(c)]:.2f}, "
              f"kanon / ceiling {kanon_ratio[c] / kanon_ratio[base(c)]:.2f}", end="")
if traced:
    print()
import os
if os.path.exists(f"{work}/{configs[0]}.1.baseline.wrk"):
    print("\nBaseline (LOAD_BENCH_BASELINE) against this build, kanon / ceiling at saturation in the "
          "same rounds (median; rounds): " + ", ".join(
        f"{c} {med(b):.2f} → {med(k):.2f} ({', '.join(f'{x:.2f}' for x in b)} → {', '.join(f'{x:.2f}' for x in k)})"
        for c in configs
        for b, k in [([wrk(f"{work}/{c}.{r}.baseline.wrk") / wrk(f"{work}/{c}.{r}.ceiling.wrk") for r in range(1, rounds + 1)],
                      [wrk(f"{work}/{c}.{r}.kanon.wrk") / wrk(f"{work}/{c}.{r}.ceiling.wrk") for r in range(1, rounds + 1)])]))
reviews = {c: metric(open(f"{work}/{c}.kanon.metrics").read(), "kanon_admission_requests_total")
           for c in configs}
print("\nkanon's CPU time per review answered: " + ", ".join(
    f"{c} {int(open(f'{work}/{c}.kanon.cpu').read()) / tck / max(reviews[c], 1) * 1e6:.0f} µs"
    for c in configs))
PY
