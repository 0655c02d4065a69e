#!/usr/bin/env bash
# The per-template figures of issue 9, robust to this kind of machine: runs the engine's
# `template_in_place` and `condition/native` benches ROUNDS times (default 5) and prints, for each
# case, the median over the rounds of criterion's median, with the lowest and highest round.
# A shared VM slows down for tens of seconds at a time; one round caught in such a stretch moves
# its figures by a third, the median of the rounds does not follow it.
#
#   scripts/template-bench.sh [ROUNDS]
#
# Each round takes about 90 seconds. Criterion's own results stay in target/criterion/.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
filter='template_in_place|template/condition/native'
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# Built once, outside the rounds.
cargo bench -q -p kanon-engine --bench programs --no-run

criterion_dir="${CARGO_TARGET_DIR:-target}/criterion"
for round in $(seq 1 "$rounds"); do
	echo "== round $round of $rounds ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1 /proc/loadavg))" >&2
	cargo bench -q -p kanon-engine --bench programs -- "$filter" >/dev/null
	for estimates in "$criterion_dir"/template_in_place/*/new/estimates.json \
		"$criterion_dir"/template/condition_native/new/estimates.json; do
		case_dir=$(dirname "$(dirname "$estimates")")
		name="$(basename "$(dirname "$case_dir")")/$(basename "$case_dir")"
		median=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$estimates")
		printf '%s\t%s\n' "$name" "$median" >>"$results"
	done
done

python3 - "$results" "$rounds" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ns = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append(float(ns))
print(f"{'case':<55} {'median of rounds':>17} {'lowest':>9} {'highest':>9}  (µs, {sys.argv[2]} rounds)")
for name in sorted(rows):
    values = rows[name]
    print(f"{name:<55} {statistics.median(values) / 1000:>17.2f} {min(values) / 1000:>9.2f} {max(values) / 1000:>9.2f}")
EOF
