#!/usr/bin/env bash
# A long randomized comparison of kanon's MutatingAdmissionPolicy evaluation with a real
# kube-apiserver 1.35 (issue 35 §4): the end-to-end scenario
# `map_random::random_mutating_policies_agree_with_kube_apiserver` with many more generated
# policies (default 1,000) on a fresh seed. Each policy (JSONPatch and ApplyConfiguration
# mutations over a Deployment or a ConfigMap, right and wrong types, under Fail and Ignore) is
# applied by the apiserver (a server-side dry run) and by `kanon apply`, to the object bare and as
# the AdmissionReview a webhook receives; any difference fails the run and is printed with its
# policy.
#
#   scripts/map-random.sh [CASES] [SEED]
#
# SEED is a number (to repeat a run: it is printed) or `fresh` (the default). Builds or finds the
# control plane as the end-to-end suite does (Go, first time 5-15 min).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
cases="${1:-1000}"
seed="${2:-fresh}"
if [ "$seed" = fresh ]; then
  seed=$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')
fi
echo "map-random: $cases policies, seed $seed"
export KANON_MAP_RANDOM_CASES="$cases"
export KANON_MAP_RANDOM_SEED="$seed"
exec cargo test -p kanon --test e2e -- map_random --nocapture
