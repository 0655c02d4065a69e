#!/usr/bin/env bash
# Checks the Helm chart offline: `helm lint` and `helm template` with the default values and with
# non-default ones, every rendered manifest validated against the Kubernetes API schemas
# (kubernetes-validate, strict), values the schema must refuse refused, and the properties the
# chart promises (least privilege, no caBundle or generated rules in the chart, security context)
# present in what it renders.
#
# usage: scripts/check-chart.sh         (needs helm: `cargo xtask cluster build` provides it)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(cargo xtask cluster env)"
helm=${KANON_HELM:?helm not found: run cargo xtask cluster build}
chart=charts/kanon
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

fail() { echo "error: $*" >&2; exit 1; }

# name | values
variants=(
  "default|"
  "cert-manager|--set certificates.mode=cert-manager --set certificates.certManager.issuerRef.name=my-issuer --set certificates.certManager.issuerRef.kind=ClusterIssuer"
  "cert-manager-own-ca|--set certificates.mode=cert-manager"
  "monitoring|--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.grafanaDashboard.enabled=true"
  "operator-choices|--set webhook.rules=all --set webhook.failurePolicy=Ignore --set replicaCount=3 --set lookups.allowSecrets=true --set lookups.httpAllowCIDRs={10.0.0.0/8} --set rbac.lookupRules[0].apiGroups={apps} --set rbac.lookupRules[0].resources={replicasets} --set rbac.lookupRules[0].verbs={get} --set logFormat=text --set priorityClassName=system-cluster-critical"
  "single-replica|--set replicaCount=1"
)
for variant in "${variants[@]}"; do
  name=${variant%%|*}
  values=${variant#*|}
  echo "== $name"
  # shellcheck disable=SC2086
  "$helm" lint --strict "$chart" $values >/dev/null || fail "helm lint ($name)"
  # shellcheck disable=SC2086
  "$helm" template kanon "$chart" --namespace kanon-system $values > "$out/$name.yaml" \
    || fail "helm template ($name)"
  # Kinds of other projects (cert-manager, Prometheus Operator) have no schema here: reported,
  # not failed.
  scripts/validate-manifests.sh "$out/$name.yaml" | grep -v '^INFO' || true
  scripts/validate-manifests.sh "$out/$name.yaml" >/dev/null || fail "invalid manifests ($name)"
done

echo "== what the chart promises"
default="$out/default.yaml"
grep -q '^ *caBundle:' "$default" && fail "the chart must not carry a caBundle: kanon injects it"
grep -q 'readOnlyRootFilesystem: true' "$default" || fail "read-only root filesystem"
grep -q 'allowPrivilegeEscalation: false' "$default" || fail "no privilege escalation"
grep -q 'type: RuntimeDefault' "$default" || fail "seccomp RuntimeDefault"
grep -q 'runAsNonRoot: true' "$default" || fail "non-root"
grep -q 'kind: PodDisruptionBudget' "$default" || fail "a PodDisruptionBudget with 2 replicas"
grep -q 'kind: PodDisruptionBudget' "$out/single-replica.yaml" && fail "no PodDisruptionBudget with 1 replica"
grep -q 'podAntiAffinity' "$default" || fail "pod anti-affinity"
grep -q '"kanon-system"' "$default" || fail "kanon's own namespace excluded from its webhooks"
grep -q 'verbs: \["\*"\]' "$default" && fail "no wildcard verbs in the RBAC"
grep -q 'resources: \["\*"\]' "$default" && fail "no wildcard resources in the RBAC"
grep -q 'kind: Secret$' "$default" && fail "the chart creates no Secret: kanon does"
grep -q 'cert-manager.io/inject-ca-from' "$out/cert-manager.yaml" || fail "cert-manager mode: CA injection annotation"

echo "== values the schema refuses"
for bad in "webhook.failurePolicy=Sometimes" "webhook.rules=some" "certificates.mode=vault" \
           "webhook.timeoutSeconds=60" "replicaCount=0" "unknownValue=1"; do
  if "$helm" template kanon "$chart" --set "$bad" >/dev/null 2>&1; then
    fail "the schema accepted --set $bad"
  fi
done
echo "chart checks passed"
