#!/usr/bin/env bash
# Checks the Helm chart offline: `helm lint` and `helm template` with the default values and with
# non-default ones, every rendered manifest validated against the Kubernetes API schemas
# (kubernetes-validate, strict), values the schema must refuse refused, and the properties the
# chart promises (least privilege, no caBundle or generated rules in the chart, security context,
# a NetworkPolicy only when enabled and never without a kube-apiserver source, the policy library
# only when asked for, in the mode asked for, PolicyExceptions read only in the exception
# namespaces, the audit's flags and its RBAC only when it is on, every metric the dashboard and
# the alerts query one kanon exports) present in what it renders.
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
  "client-certificates|--set webhook.clientCAConfigMap=apiserver-webhook-ca --set serving.maxConcurrentReviews=4 --set resources.limits.memory=1Gi"
  "network-policy|--set networkPolicy.enabled=true --set networkPolicy.apiserver.from[0].ipBlock.cidr=10.0.0.10/32 --set networkPolicy.apiserver.from[1].ipBlock.cidr=10.0.0.11/32 --set networkPolicy.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring --set metrics.port=9090 --set networkPolicy.extraIngress[0].from[0].podSelector.matchLabels.app=debug --set networkPolicy.extraIngress[0].ports[0].port=8443"
  "library-restricted-warn|--set library.podSecurity=restricted --set library.validationActions={Warn} --set library.excludedNamespaces={ci,sandbox} --set library.bestPractices={disallow-latest-tag,require-probes,default-resources}"
  "library-baseline|--set library.podSecurity=baseline"
  "library-rollout|--set library.podSecurity.enforce=baseline --set library.podSecurity.warn=restricted --set library.podSecurity.audit=restricted --set library.podSecurity.exemptions.namespaces={kube-system} --set library.podSecurity.exemptions.usernames={system:serviceaccount:ci:deployer} --set-json library.bestPractices=[\"disallow-latest-tag\",{\"name\":\"require-probes\",\"validationActions\":[\"Warn\"]}]"
  "exceptions|--set exceptions.namespaces={policy-exceptions}"
  "tracing|--set tracing.otlpEndpoint=http://otel-collector.monitoring:4318 --set tracing.protocol=http/protobuf --set-json tracing.samplingRatio=0.25 --set clusterName=prod-eu-1 --set tracing.env[0].name=OTEL_BSP_MAX_QUEUE_SIZE --set-string tracing.env[0].value=4096 --set decisionLog=true"
  "audit-disabled|--set audit.enabled=false --set metrics.prometheusRule.enabled=true"
  "audit-tuned|--set audit.interval=0 --set-json audit.qps=2.5 --set-json audit.cpu=0.5 --set audit.checkpointInterval=5s --set audit.pageSize=100000 --set audit.pageMiB=2 --set audit.maxResults=50 --set audit.reportOwnedResults=true --set audit.reportPasses=true --set audit.listRules[0].apiGroups={example.com} --set audit.listRules[0].resources={widgets} --set audit.listRules[0].verbs={list}"
  "events|--set events.enabled=true --set events.kinds={deny,warn} --set-json events.qps=2.5 --set events.burst=10"
  "network-policy-no-metrics|--set networkPolicy.enabled=true --set networkPolicy.apiserver.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system --set networkPolicy.apiserver.from[0].podSelector.matchLabels.component=kube-apiserver"
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
  # Kinds of other projects (cert-manager, Prometheus Operator) and kanon's own (the library's
  # policies) have no schema here: reported, not failed. kanon's are checked by kanon itself:
  # crates/kanon/tests/chart_library.rs compiles what the library template renders.
  scripts/validate-manifests.sh "$out/$name.yaml" | grep -v '^INFO' || true
  scripts/validate-manifests.sh "$out/$name.yaml" >/dev/null || fail "invalid manifests ($name)"
done

echo "== what the chart promises"
# Helm installs every file under the chart's crds/, subfolders included, and skips the CRDs the
# cluster has already: kanon's CRDs and, from crds/openreports/, the OpenReports ones (which
# Kyverno or another producer may have installed).
chart_crds=$("$helm" show crds "$chart")
[ "$(grep -c '^kind: CustomResourceDefinition$' <<<"$chart_crds")" -eq "$(find "$chart/crds" -name '*.yaml' | wc -l)" ] \
  || fail "helm show crds: one CRD per file under crds/"
for crd in reports.openreports.io clusterreports.openreports.io policyexceptions.policy.kanon.dev; do
  grep -q "^  name: $crd\$" <<<"$chart_crds" || fail "the chart installs the CRD $crd"
done
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
grep -q 'kind: NetworkPolicy' "$default" && fail "no NetworkPolicy by default"
# The NetworkPolicy document of a render.
network_policy() { awk -v RS='\n---\n' '/\nkind: NetworkPolicy\n/' "$1"; }
policy=$(network_policy "$out/network-policy.yaml")
[ -n "$policy" ] || fail "networkPolicy.enabled: a NetworkPolicy"
grep -q 'port: 8443$' <<<"$policy" || fail "NetworkPolicy: the webhook port (8443)"
grep -q 'port: 9090$' <<<"$policy" || fail "NetworkPolicy: the metrics port (metrics.port)"
grep -q 'cidr: 10.0.0.10/32' <<<"$policy" || fail "NetworkPolicy: the apiserver ipBlock"
grep -q 'kubernetes.io/metadata.name: monitoring' <<<"$policy" || fail "NetworkPolicy: the metrics namespaceSelector"
grep -q 'app: debug' <<<"$policy" || fail "NetworkPolicy: extraIngress"
grep -q 'Egress' <<<"$policy" && fail "NetworkPolicy: ingress only, egress unrestricted"
# No metrics sources: no metrics rule (a rule without `from` would admit everyone).
policy=$(network_policy "$out/network-policy-no-metrics.yaml")
[ -n "$policy" ] || fail "networkPolicy.enabled: a NetworkPolicy"
grep -q 'port: 8443$' <<<"$policy" || fail "NetworkPolicy: the webhook port (8443)"
grep -q 'port: 8080$' <<<"$policy" && fail "NetworkPolicy: no metrics rule without metrics.from"
[ "$(grep -c -- '- from:' <<<"$policy")" -eq 1 ] || fail "NetworkPolicy: only the apiserver rule without metrics.from"
# Enabled without an apiserver source: refused, with the reason.
if err=$("$helm" template kanon "$chart" --set networkPolicy.enabled=true 2>&1 >/dev/null); then
  fail "networkPolicy.enabled without networkPolicy.apiserver.from rendered"
fi
grep -q 'networkPolicy.apiserver.from is empty' <<<"$err" \
  || fail "networkPolicy.enabled without networkPolicy.apiserver.from: unexpected error: $err"

# The memory limit is derived from kanon's bounds (values.yaml, `resources`): base + body buffer
# + slots x 2 x review budget + connections x 64 KiB + program workers x their memory + the
# objects read for references.
expected=$(( 64 + 32 + 2 * 2 * 24 + (1024 * 64 + 1023) / 1024 + 2 * 128 + 32 ))
grep -q "memory: ${expected}Mi" "$default" || fail "the derived memory limit ${expected}Mi"
grep -q -- '--max-concurrent-reviews=2' "$default" || fail "kanon runs with the slots the limit counts"
grep -q -- '--max-review-memory-mib=24' "$default" || fail "kanon runs with the review budget the limit counts"
grep -q -- '--body-buffer-mib=32' "$default" || fail "kanon runs with the body buffer the limit counts"
grep -q -- '--max-connections=1024' "$default" || fail "kanon runs with the connection cap the limit counts"
grep -q -- '--object-cache-mib=32' "$default" || fail "kanon runs with the lookup memory the limit counts"
grep -q -- '--object-read-max-mib=4' "$default" || fail "kanon runs with the bound on one object read"
grep -q 'memory: 1Gi' "$out/client-certificates.yaml" || fail "a memory limit given is kept"
# Probes on the metrics port (plain HTTP, its own thread), never on the webhook port, which may
# require client certificates.
[ "$(grep -c 'port: metrics' "$default")" -ge 3 ] || fail "the three probes on the metrics port"
grep -q 'scheme: HTTPS' "$default" && fail "no probe on the HTTPS webhook port"
grep -q -- '--client-ca-file=/etc/kanon/client-ca/ca.crt' "$out/client-certificates.yaml" \
  || fail "client certificates: the flag"
grep -q 'name: apiserver-webhook-ca' "$out/client-certificates.yaml" || fail "client certificates: the ConfigMap"
grep -q -- '--client-ca-file' "$default" && fail "no client certificates by default"

# The policy library (templates/library.yaml, from the chart's copy in library/): nothing by
# default; the level's files and the best practices named, every validation in the mode, every
# policy with the excluded namespaces in its namespaceSelector.
library=$chart/library
# The library's policies in a render, one document after another.
library_policies() { awk -v RS='\n---\n' '/\nkind: Cluster(Validate|Override)Policy\n/ {print; print "---"}' "$1"; }
# The validationActions of every policy in a render, one line per policy ("Warn", "Deny Audit").
validation_actions() {
  awk '/^  validationActions:$/ {on = 1; list = ""; next}
       on && /^  - / {list = list (list == "" ? "" : " ") substr($0, 5); next}
       on {print list; on = 0}
       END {if (on) print list}' "$1"
}
# How many documents of `kind` the files hold.
count_kind() { local kind=$1; shift; cat "$@" | grep -c "^kind: $kind\$" || true; }
grep -Eq '^kind: Cluster(Validate|Override)Policy$' "$default" \
  && fail "library: no policy by default (library.podSecurity none, no best practices)"

render="$out/library-restricted-warn.yaml"
files=("$library"/pod-security/restricted/*.yaml "$library"/best-practices/{disallow-latest-tag,require-probes,default-resources}.yaml)
validations=$(count_kind ClusterValidatePolicy "${files[@]}")
mutations=$(count_kind ClusterOverridePolicy "${files[@]}")
[ "$validations" -gt 15 ] || fail "library: restricted has its checks ($validations)"
[ "$(count_kind ClusterValidatePolicy "$render")" -eq "$validations" ] \
  || fail "library: $validations ClusterValidatePolicies, one per document of the restricted level and the validating best practices named"
[ "$(count_kind ClusterOverridePolicy "$render")" -eq "$mutations" ] \
  || fail "library: $mutations ClusterOverridePolicy (default-resources)"
[ "$(validation_actions "$render" | wc -l)" -eq "$validations" ] || fail "library: validationActions on every validation"
[ "$(validation_actions "$render" | sort -u)" = "Warn" ] || fail "library: every validationActions is [Warn]"
excluded='    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
      - ci
      - sandbox'
policies=$(library_policies "$render")
[ "$(awk -v RS='\n---\n' -v e="$excluded" 'index($0, e) {n++} END {print n + 0}' <<<"$policies")" \
  -eq $((validations + mutations)) ] || fail "library: the excluded namespaces in every policy's namespaceSelector"
[ "$(grep -c 'app.kubernetes.io/managed-by: Helm' <<<"$policies")" -eq $((validations + mutations)) ] \
  || fail "library: the chart's labels on every policy"
grep -q 'name: pss-baseline-privileged-warn$' "$render" || fail "library: restricted includes baseline's checks (links followed)"

render="$out/library-baseline.yaml"
validations=$(count_kind ClusterValidatePolicy "$library"/pod-security/baseline/*.yaml)
[ "$(count_kind ClusterValidatePolicy "$render")" -eq "$validations" ] \
  || fail "library: $validations ClusterValidatePolicies of the baseline level"
[ "$(count_kind ClusterOverridePolicy "$render")" -eq 0 ] || fail "library: baseline has no mutation"
[ "$(validation_actions "$render" | wc -l)" -eq "$validations" ] || fail "library: validationActions on every validation"
[ "$(validation_actions "$render" | sort -u)" = "Deny" ] || fail "library: [Deny] by default"
grep -q 'namespaceSelector' <<<"$(library_policies "$render")" && fail "library: no namespaceSelector without excludedNamespaces"
grep -q 'pss-restricted-' "$render" && fail "library: baseline without restricted's checks"

# The usual rollout: each check once per mode, named by it, in that mode's action; a best practice
# in the actions given with it. crates/kanon/tests/chart_library.rs judges Pods with every
# combination of levels.
render="$out/library-rollout.yaml"
for mode in enforce warn audit; do
  [ "$(grep -c "^  name: pss-.*-$mode\$" "$render")" -eq 19 ] || fail "library: 19 checks in mode $mode"
done
[ "$(validation_actions "$render" | sort | uniq -c | awk '{print $1 " " $2}' | tr '\n' ' ')" = "19 Audit 20 Deny 20 Warn " ] \
  || fail "library: each mode's action, and the best practices' own ($(validation_actions "$render" | sort | uniq -c | tr '\n' ' '))"
grep -q 'pod-security.kubernetes.io/enforce' "$render" || fail "library: the Namespaces' Pod Security labels read"

# Refused, with the reason.
refused() {
  local expected=$1; shift
  local err
  if err=$("$helm" template kanon "$chart" "$@" 2>&1 >/dev/null); then
    fail "rendered: $*"
  fi
  grep -qF -- "$expected" <<<"$err" || fail "$*: unexpected error: $err"
}
refused 'no best practice named no-such-practice; the library has: ' --set 'library.bestPractices={disallow-latest-tag,no-such-practice}'
refused 'disallow-latest-tag, ' --set 'library.bestPractices={no-such-practice}'
refused 'Deny and Warn may not be used together' --set library.podSecurity=baseline --set 'library.validationActions={Deny,Warn}'
refused 'require-probes: Deny and Warn may not be used together' --set-json 'library.bestPractices=[{"name":"require-probes","validationActions":["Deny","Warn"]}]'
refused "at '/library/podSecurity/enforce': value must be one of" --set library.podSecurity.enforce=strict
refused 'the first install needs webhook.policyCheckFailurePolicy: Ignore' --set library.podSecurity=baseline --set webhook.policyCheckFailurePolicy=Fail
"$helm" template kanon "$chart" --is-upgrade --set library.podSecurity=baseline \
  --set webhook.policyCheckFailurePolicy=Fail | grep -q '^kind: ClusterValidatePolicy$' \
  || fail "library: an upgrade (kanon running) with policyCheckFailurePolicy Fail"

# PolicyExceptions (exceptions.namespaces): kanon honours them in the namespaces named, and reads
# them (and writes their status) only there, by a Role in each with exactly those verbs; the
# policy-check webhook checks them wherever they are written.
render="$out/exceptions.yaml"
grep -q -- '--exception-namespace=policy-exceptions$' "$render" || fail "exceptions: kanon serve --exception-namespace"
grep -q -- '--exception-namespace' "$default" && fail "exceptions: no exception namespace by default"
# The documents of `kind` in namespace `ns` of a render.
namespaced() { awk -v RS='\n---\n' -v k="$2" -v n="$3" 'index($0, "\nkind: " k "\n") && index($0, "\n  namespace: " n "\n")' "$1"; }
role=$(namespaced "$render" Role policy-exceptions)
[ -n "$role" ] || fail "exceptions: a Role in policy-exceptions"
expected_rules='rules:
  - apiGroups: ["policy.kanon.dev"]
    resources: ["policyexceptions"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["policy.kanon.dev"]
    resources: ["policyexceptions/status"]
    verbs: ["patch"]'
[ "$(sed -n '/^rules:$/,$p' <<<"$role")" = "$expected_rules" ] \
  || fail "exceptions: the Role grants exactly get, list, watch policyexceptions and patch policyexceptions/status: $role"
binding=$(namespaced "$render" RoleBinding policy-exceptions)
grep -q 'name: kanon-exceptions$' <<<"$binding" || fail "exceptions: a RoleBinding to the Role in policy-exceptions"
grep -q 'namespace: kanon-system$' <<<"$(sed -n '/^subjects:$/,$p' <<<"$binding")" \
  || fail "exceptions: the RoleBinding's subject is kanon's ServiceAccount"
# Roles of a render, one document after another.
roles() { awk -v RS='\n---\n' '/\nkind: Role\n/ {print; print "---"}' "$1"; }
for file in "$default" "$render"; do
  grep -q 'policyexceptions' <<<"$(awk -v RS='\n---\n' '/\nkind: ClusterRole\n/' "$file")" \
    && fail "exceptions: never granted cluster-wide ($file)"
  # The resources of the policy-check webhook's rule.
  check=$(awk '/- name: policies.kanon.dev$/ {on = 1} on && /resources:/ {print; exit}' "$file")
  grep -q '"policyexceptions"' <<<"$check" || fail "exceptions: the policy-check webhook checks policyexceptions ($file)"
done
grep -q 'policyexceptions' <<<"$(roles "$default")" && fail "exceptions: no Role for PolicyExceptions by default"
[ "$(grep -c '^kind: Role$' <<<"$(roles "$render")")" -eq $(( $(grep -c '^kind: Role$' <<<"$(roles "$default")") + 1 )) ] \
  || fail "exceptions: one Role more than by default, in policy-exceptions"

# The audit (audit.*): on by default, with its flags, the Pod's name as its Lease identity, list
# on exactly audit.listRules (never Secrets by default), its reports, and the Lease by name in a
# Role of its own; off: `--no-audit` and none of that RBAC.
# The documents of `kind` named `name` of a render.
named() { awk -v RS='\n---\n' -v k="$2" -v n="$3" 'index($0, "\nkind: " k "\n") && index($0, "\n  name: " n "\n")' "$1"; }
for flag in --audit-interval=1h --audit-qps=10 --audit-cpu=0.05 --audit-checkpoint-interval=30s --audit-page-size=500 --report-max-results=1000; do
  grep -q -- "- $flag\$" "$default" || fail "audit: $flag by default"
done
grep -q -- '--no-audit' "$default" && fail "audit: on by default"
grep -Eq -- '- --report-(owned-results|passes)$' "$default" && fail "audit: owned results and passes counted, not listed, by default"
grep -A3 -- '- name: POD_NAME$' "$default" | grep -q 'fieldPath: metadata.name$' \
  || fail "audit: POD_NAME from the Pod's name (the audit Lease's identity)"
cluster_role=$(named "$default" ClusterRole kanon)
# The rules of the ClusterRole from the audit's reports on.
audit_rules=$(sed -n "/# The audit's reports/,\$p" <<<"$cluster_role" | grep -v '^ *#')
expected_rules='  - apiGroups: ["openreports.io"]
    resources: ["reports", "clusterreports"]
    verbs: ["get", "list", "create", "update", "patch", "delete"]
  - apiGroups:
    - ""
    resources:
    - pods
    - services
    - configmaps
    - serviceaccounts
    verbs:
    - list
  - apiGroups:
    - apps
    resources:
    - deployments
    - statefulsets
    - daemonsets
    - replicasets
    verbs:
    - list
  - apiGroups:
    - batch
    resources:
    - jobs
    - cronjobs
    verbs:
    - list
  - apiGroups:
    - networking.k8s.io
    resources:
    - ingresses
    - networkpolicies
    verbs:
    - list'
[ "$audit_rules" = "$expected_rules" ] \
  || fail "audit: the ClusterRole grants get, list, create, update, patch, delete on the reports and list on the default audit.listRules, last: $audit_rules"
grep -q 'secrets' <<<"$cluster_role" && fail "audit: no Secret in the ClusterRole by default"
role=$(named "$default" Role kanon-audit)
[ "$(grep -c '^  namespace: kanon-system$' <<<"$role")" -eq 1 ] || fail "audit: the Lease Role in the release namespace"
expected_rules='rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["kanon-audit"]
    verbs: ["get", "update"]'
[ "$(sed -n '/^rules:$/,$p' <<<"$role" | grep -v '^ *#')" = "$expected_rules" ] \
  || fail "audit: the Lease Role grants create leases, and get, update on kanon-audit only: $role"
binding=$(named "$default" RoleBinding kanon-audit)
grep -q 'name: kanon-audit$' <<<"$(sed -n '/^roleRef:$/,$p' <<<"$binding")" || fail "audit: a RoleBinding to the Lease Role"
grep -q 'namespace: kanon-system$' <<<"$(sed -n '/^subjects:$/,$p' <<<"$binding")" \
  || fail "audit: the Lease RoleBinding's subject is kanon's ServiceAccount"
render="$out/audit-tuned.yaml"
for flag in --audit-interval=0 --audit-qps=2.5 --audit-cpu=0.5 --audit-checkpoint-interval=5s --audit-page-size=100000 --audit-page-mib=2 --report-max-results=50 --report-owned-results --report-passes; do
  grep -q -- "- $flag\$" "$render" || fail "audit: $flag from the values"
done
grep -A6 -- '- example.com$' <<<"$(named "$render" ClusterRole kanon)" | tr -d ' \n' | grep -q -- '-example.comresources:-widgetsverbs:-list' \
  || fail "audit: audit.listRules rendered as given"
grep -q -- '- pods$' <<<"$(named "$render" ClusterRole kanon)" && fail "audit: audit.listRules replaces the default rules"
# Traces: off by default; the collector, protocol, ratio, cluster name and OTEL_* variables as given.
grep -Eq -- '- --(otlp-|trace-|cluster-name|decision-log)' "$default" && fail "tracing: no trace or decision-log flag by default"
render="$out/tracing.yaml"
for flag in --otlp-endpoint=http://otel-collector.monitoring:4318 --otlp-protocol=http/protobuf --trace-sampling-ratio=0.25 --cluster-name=prod-eu-1 --decision-log=stdout; do
  grep -q -- "- $flag\$" "$render" || fail "tracing: $flag from the values"
done
grep -A1 -- '- name: OTEL_BSP_MAX_QUEUE_SIZE$' "$render" | grep -q 'value: "4096"' || fail "tracing: tracing.env passed to kanon"
render="$out/audit-disabled.yaml"
grep -q -- '- --no-audit$' "$render" || fail "audit disabled: kanon runs with --no-audit"
grep -Eq -- '^ *- --(audit-|report-)' "$render" && fail "audit disabled: no audit flag"
[ -z "$(named "$render" Role kanon-audit)$(named "$render" RoleBinding kanon-audit)" ] || fail "audit disabled: no Lease Role(Binding)"
grep -Eq 'leases|openreports.io|- list$' "$render" && fail "audit disabled: no lease, report or audit list rule"
grep -q 'alert: Kanon.*Audit' "$render" && fail "audit disabled: no audit alert"
grep -q 'alert: KanonNoAuditor' "$out/monitoring.yaml" || fail "audit: the KanonNoAuditor alert"
grep -q 'alert: KanonAuditFailing' "$out/monitoring.yaml" || fail "audit: the KanonAuditFailing alert"
grep -q 'alert: KanonAuditReportReplaced' "$out/monitoring.yaml" || fail "audit: the KanonAuditReportReplaced alert"

# Kubernetes Events (events.*): off by default, no flag and no Event RBAC; on, the kinds, rate and
# burst as given, and create and patch on events.events.k8s.io in the ClusterRole.
grep -q -- '--events' "$default" && fail "events: no --events flag by default"
grep -q 'events.k8s.io' "$default" && fail "events: no Event RBAC by default"
render="$out/events.yaml"
for flag in --events=deny,warn --events-qps=2.5 --events-burst=10; do
  grep -q -- "- $flag\$" "$render" || fail "events: $flag from the values"
done
grep -A2 'apiGroups: \["events.k8s.io"\]' <<<"$(named "$render" ClusterRole kanon)" | tr -d ' \n' \
  | grep -q 'resources:\["events"\]verbs:\["create","patch"\]$' \
  || fail "events: the ClusterRole grants create and patch on events.events.k8s.io"

# The dashboard is valid JSON with an Audit row, and every kanon_ metric it and the alerts query
# is one kanon names in its sources (`_total`, `_bucket`, `_sum`, `_count` are the exposition's
# suffixes).
dashboard=$chart/dashboards/kanon.json
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$dashboard" || fail "the dashboard is not JSON"
grep -q '"title": "Audit"' "$dashboard" || fail "the dashboard's Audit row"
registered=$(grep -rhoE '"kanon_[a-z_]+"' crates/*/src | tr -d '"' | sort -u)
for metric in $(grep -ohE 'kanon_[a-z_]+' "$dashboard" "$chart/templates/prometheusrule.yaml" | sed -E 's/_(total|bucket|sum|count)$//' | sort -u); do
  grep -qx "$metric" <<<"$registered" || fail "the dashboard or the alerts query $metric, which kanon does not register"
done

echo "== values the schema refuses"
for bad in "webhook.failurePolicy=Sometimes" "webhook.rules=some" "certificates.mode=vault" \
           "webhook.timeoutSeconds=60" "replicaCount=0" "unknownValue=1" \
           "serving.bodyBufferMiB=4" "serving.maxConnections=0" "serving.unknown=1" \
           "networkPolicy.enabled=yes" "networkPolicy.egress=true" \
           "networkPolicy.apiserver.from[0].ipBlok.cidr=10.0.0.1/32" \
           "library.podSecurity=privileged" "library.validationActions={Block}" \
           "library.validationActions={Warn,Warn}" "library.bestPractices=Latest_Tag" \
           "library.excludedNamespaces={Not_A_Namespace}" "library.mode=Warn" \
           "exceptions.namespaces={Not_A_Namespace}" "exceptions.namespaces={ops,ops}" \
           "exceptions.namespaces=ops" "exceptions.namespace=ops" \
           "audit.enabled=yes" "audit.interval=1d" "audit.interval=hourly" "audit.qps=-1" \
           "audit.pageSize=0" "audit.pageMiB=0" "audit.maxResults=0" "audit.unknown=1" "audit.cpu=0" "audit.cpu=2" \
           "audit.checkpointInterval=often" "audit.reportOwnedResults=yes" "audit.reportPasses=1" \
           "tracing.protocol=thrift" "tracing.otlpEndpoint=collector:4317" "tracing.samplingRatio=2" \
           "tracing.env[0].name=RUST_LOG" "clusterName=prod/eu" "decisionLog=yes" \
           "events.enabled=yes" "events.kinds={block}" "events.kinds={deny,deny}" "events.qps=0" \
           "events.burst=0" "events.unknown=1" \
           "audit.listRules[0].apiGroups={apps}" \
           "audit.listRules[0].apiGroups={apps},audit.listRules[0].resources={deployments},audit.listRules[0].verbs={get}" \
           "audit.listRules[0].apiGroups={apps},audit.listRules[0].resources={pods},audit.listRules[0].verbs={list},audit.listRules[0].resourceNames={a}"; do
  if "$helm" template kanon "$chart" --set "$bad" >/dev/null 2>&1; then
    fail "the schema accepted --set $bad"
  fi
done
echo "chart checks passed"
