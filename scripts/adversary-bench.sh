#!/usr/bin/env bash
# Adversarial bench of kanon's webhook port (crates/kanon/benches/adversary/): what an
# unauthenticated client on the network can do to `kanon serve`, reproduced on loopback, each
# attack against a fresh kanon (release build), with kanon's RSS and descriptors and the latency
# of legitimate reviews and probes measured meanwhile. One Markdown table row per attack on
# standard output, progress on standard error; about 3½ minutes for all attacks.
#
#   scripts/adversary-bench.sh                           every attack
#   scripts/adversary-bench.sh big-array,slowloris       some (names: see the bench's doc)
#   KANON_ADVERSARY_ARGS="--some-flag 1" scripts/adversary-bench.sh      more `kanon serve` arguments
#   KANON_PROBE_URL=metrics scripts/adversary-bench.sh   probes on the plain-HTTP metrics port
#   KANON_BIN=/path/to/kanon scripts/adversary-bench.sh  another build (e.g. the one before a change)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  export KANON_ADVERSARY_ATTACKS="$1"
fi
exec cargo bench -q -p kanon --bench adversary
