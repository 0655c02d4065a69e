#!/usr/bin/env bash
# kanon-cel against cel-go v0.26.0 as kube-apiserver 1.35 runs it (issue 19 §5): the same
# expressions on the same objects (crates/kanon-cel/benches/cases.json), compiled once, evaluated
# many times. Prints, per expression, kanon's median ns per evaluation, cel-go's, and the ratio
# kanon / cel-go, then the geometric mean of the ratios.
#
#   scripts/cel-bench.sh [ROUNDS]
#
# First both sides evaluate every case once and the script checks that they give the same result
# (and prints both, with their costs); it stops if any differs. Then ROUNDS rounds (default 3),
# each running kanon's criterion bench (crates/kanon-cel/benches/evaluate.rs: 1 s warm-up, 3 s of
# 100 samples per case) and then the Go benchmark (crates/kanon-cel/benches/cel-go: go test
# -bench, 3 samples of 1 s per case), alternating so that a slow stretch of a shared machine
# falls on both. kanon's figure is the median over the rounds of criterion's median; cel-go's is
# the median of its 3 × ROUNDS samples (each one testing.B's ns/op over about a second).
# Needs Go 1.25 or newer on PATH or in /usr/local/go/bin. About 90 seconds a round.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-3}"
go_samples=3
go_dir=crates/kanon-cel/benches/cel-go
criterion_dir="${CARGO_TARGET_DIR:-target}/criterion/kanon_cel"

go=$(command -v go || true)
if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
if [ -z "$go" ]; then
	echo "cel-bench: needs Go 1.25 or newer on PATH or in /usr/local/go/bin" >&2
	exit 2
fi
# Never another Go toolchain, no workspace above, only the module's own go.sum.
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== building (commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates/kanon-cel/src || echo ', crates/kanon-cel/src with uncommitted changes'))" >&2
cargo bench -q -p kanon-cel --bench evaluate --no-run
(cd "$go_dir" && "$go" test -c -o "$work/cel-go.test" .)

echo "== results" >&2
KANON_CEL_BENCH_RESULTS=1 cargo bench -q -p kanon-cel --bench evaluate | grep '^RESULT ' | cut -c8- >"$work/kanon.results"
(cd "$go_dir" && "$work/cel-go.test" -test.run '^TestResults$' -test.v) | grep '^RESULT ' | cut -c8- >"$work/go.results"
python3 - "$work/kanon.results" "$work/go.results" <<'EOF'
import json, sys
kanon = [json.loads(line) for line in open(sys.argv[1])]
go = {case["name"]: case for case in map(json.loads, open(sys.argv[2]))}
canonical = lambda case: json.dumps(case.get("value", {"error": case.get("error")}), sort_keys=True)
different = 0
print(f"{'case':<24} {'cost kanon':>10} {'cost cel-go':>11}  result")
for case in kanon:
    other = go.get(case["name"])
    same = other is not None and canonical(case) == canonical(other)
    different += not same
    print(f"{case['name']:<24} {case['cost']:>10} {other['cost'] if other else '-':>11}  "
          f"{'same' if same else 'DIFFERENT'}: {canonical(case)}")
    if not same:
        print(f"{'':<48}cel-go: {canonical(other) if other else 'missing'}")
if different or len(go) != len(kanon):
    sys.exit(f"cel-bench: {different} case(s) give different results; not timing them")
EOF

: >"$work/timings"
for round in $(seq 1 "$rounds"); do
	echo "== round $round of $rounds ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)): kanon-cel" >&2
	if ! cargo bench -q -p kanon-cel --bench evaluate -- --warm-up-time 1 --measurement-time 3 >"$work/criterion.log" 2>&1; then
		cat "$work/criterion.log" >&2
		exit 1
	fi
	for estimates in "$criterion_dir"/*/new/estimates.json; do
		name=$(basename "$(dirname "$(dirname "$estimates")")")
		median=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$estimates")
		printf 'kanon\t%s\t%s\n' "$name" "$median" >>"$work/timings"
	done
	echo "== round $round of $rounds ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)): cel-go" >&2
	(cd "$go_dir" && "$work/cel-go.test" -test.run '^$' -test.bench . -test.count "$go_samples" -test.benchtime 1s) |
		awk '$1 ~ /^BenchmarkEvaluate\// && $4 == "ns/op" { name = $1; sub(/^BenchmarkEvaluate\//, "", name); sub(/-[0-9]+$/, "", name); printf "cel-go\t%s\t%s\n", name, $3 }' >>"$work/timings"
done
echo "== done ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2

python3 - "$work/timings" "$work/kanon.results" "$rounds" "$go_samples" <<'EOF'
import math, statistics, sys
order = [line.split('"name":"', 1)[1].split('"', 1)[0] for line in open(sys.argv[2])]
samples = {}
for line in open(sys.argv[1]):
    side, name, ns = line.rstrip("\n").split("\t")
    samples.setdefault((side, name), []).append(float(ns))
rounds, go_samples = int(sys.argv[3]), int(sys.argv[4])
print()
print(f"{'case':<24} {'kanon ns/eval':>13} {'cel-go ns/eval':>14} {'kanon/cel-go':>12}   "
      f"(kanon: median of {rounds} criterion medians; cel-go: median of {rounds * go_samples} samples)")
ratios = []
for name in order:
    kanon, go = samples.get(("kanon", name)), samples.get(("cel-go", name))
    if not kanon or not go:
        print(f"{name:<24} missing")
        continue
    k, g = statistics.median(kanon), statistics.median(go)
    ratios.append(k / g)
    print(f"{name:<24} {k:>13.1f} {g:>14.1f} {k / g:>12.2f}")
geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
print(f"{'geometric mean':<24} {'':>13} {'':>14} {geomean:>12.2f}")
print(f"slower than cel-go: {', '.join(n for n, r in zip(order, ratios) if r > 1) or 'none'}")
EOF
