#!/usr/bin/env bash
# A long randomized comparison of kanon-cel with kube-apiserver 1.35's CEL (issue 35 §4): the
# test `random_expressions_agree_with_kube_apiserver` of crates/kanon-cel/tests/oracle.rs with
# many more generated expressions (default 100,000) on a fresh seed each run. Every difference
# is shrunk to a small reproducer; the run fails on any reproducer that
# crates/kanon-cel/tests/oracle/known-random-differences.txt does not list (those listed there
# were found on the tests' fixed seed; a fresh seed finds others of the same families).
#
#   scripts/cel-random.sh [CASES] [SEED]
#
# SEED is a number (to repeat a run: the seed is printed) or `fresh` (the default). Needs Go
# 1.25 or newer on PATH or in /usr/local/go/bin (the oracle is built once into
# ~/.cache/kanon/cel-oracle/).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
export KANON_CEL_RANDOM_CASES="${1:-100000}"
export KANON_CEL_RANDOM_SEED="${2:-fresh}"
exec cargo test --release -p kanon-cel --test oracle -- random_expressions_agree_with_kube_apiserver --nocapture
