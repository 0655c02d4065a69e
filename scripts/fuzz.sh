#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS_PER_TARGET seconds each (default 60) and
# fails on any crash, panic, timeout or out-of-memory.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Installs what it needs when missing: a minimal nightly toolchain (rustup) and cargo-fuzz
# (`cargo install --locked`). Builds the targets once (release, with debug assertions and
# AddressSanitizer: cargo fuzz's defaults), then runs them one after the other. Each starts
# from the tracked seed corpus fuzz/corpus/<target>/ and writes what it finds to the
# untracked fuzz/corpus-work/<target>/; crash inputs go to fuzz/artifacts/<target>/.
#
# Environment: FUZZ_TARGETS (space-separated) runs only those targets; FUZZ_TIMEOUT is the
# seconds one input may take before it counts as a hang (default 10); FUZZ_RSS_LIMIT_MB the
# memory limit (default 2048).
set -euo pipefail

seconds="${1:-60}"
case "$seconds" in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS_PER_TARGET]" >&2
	exit 2
	;;
esac
timeout_seconds="${FUZZ_TIMEOUT:-10}"
rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}"

cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v rustup >/dev/null 2>&1; then
	echo "fuzz.sh: rustup is needed (https://rustup.rs)" >&2
	exit 1
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
	echo "== installing the nightly toolchain (minimal profile)"
	rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
	echo "== installing cargo-fuzz"
	cargo install cargo-fuzz --locked
fi

all_targets="$(cd fuzz && cargo +nightly fuzz list)"
targets="${FUZZ_TARGETS:-$all_targets}"
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"

# Where cargo puts the binaries: fuzz/target, or CARGO_TARGET_DIR when set (relative to fuzz/,
# where cargo runs).
case "${CARGO_TARGET_DIR:-}" in
	"") target_dir="fuzz/target" ;;
	/*) target_dir="$CARGO_TARGET_DIR" ;;
	*) target_dir="fuzz/$CARGO_TARGET_DIR" ;;
esac

echo "== building the fuzz targets (once)"
build_started=$SECONDS
(cd fuzz && cargo +nightly fuzz build)
echo "== built in $((SECONDS - build_started)) s"

failed=0
summary=()
for target in $targets; do
	if ! grep -qx "$target" <<<"$all_targets"; then
		echo "fuzz.sh: no target named $target (targets: $(echo $all_targets))" >&2
		exit 2
	fi
	binary="$target_dir/$host/release/$target"
	work="fuzz/corpus-work/$target"
	artifacts="fuzz/artifacts/$target"
	log="fuzz/artifacts/$target.log"
	mkdir -p "$work" "$artifacts" "fuzz/corpus/$target"
	before="$(ls "$artifacts")"
	echo "== $target: ${seconds} s"
	started=$SECONDS
	status=0
	"$binary" "$work" "fuzz/corpus/$target" \
		-max_total_time="$seconds" \
		-timeout="$timeout_seconds" \
		-rss_limit_mb="$rss_limit_mb" \
		-print_final_stats=1 \
		-artifact_prefix="$artifacts/" \
		>"$log" 2>&1 || status=$?
	elapsed=$((SECONDS - started))
	runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
	new_artifacts="$(comm -13 <(echo "$before") <(ls "$artifacts") | grep -v '^slow-unit-' || true)"
	if [ "$status" -ne 0 ] || [ -n "$new_artifacts" ]; then
		failed=1
		echo "!! $target failed (exit $status); the end of $log:"
		tail -n 40 "$log"
		verdict="FAILED"
	else
		verdict="ok"
	fi
	crashes="none"
	if [ -n "$new_artifacts" ]; then
		crashes="$(sed "s|^|$artifacts/|" <<<"$new_artifacts" | tr '\n' ' ')"
	fi
	summary+=("$(printf '%-32s %-6s runs: %-10s seconds: %-6s crash artifacts: %s' \
		"$target" "$verdict" "${runs:-?}" "$elapsed" "$crashes")")
done

echo
echo "== summary (${seconds} s per target; logs in fuzz/artifacts/<target>.log)"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
	echo "== FAILED: reproduce with $target_dir/$host/release/<target> <artifact>, or" \
		"cargo +nightly fuzz run <target> <artifact> from fuzz/" >&2
	exit 1
fi
echo "== no crashes"
cd "$root"
