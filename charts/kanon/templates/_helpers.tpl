{{/*
The chart name, or .Values.nameOverride.
*/}}
{{- define "kanon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the chart's resources: .Values.fullnameOverride, else the release name, with the
chart name appended unless the release name already contains it. Truncated to 63 characters, the
limit of DNS labels.
*/}}
{{- define "kanon.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "kanon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select the webhook's pods.
*/}}
{{- define "kanon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kanon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels on every resource of the chart.
*/}}
{{- define "kanon.labels" -}}
helm.sh/chart: {{ include "kanon.chart" . }}
{{ include "kanon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The name of the ServiceAccount the webhook runs as.
*/}}
{{- define "kanon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kanon.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The webhook image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "kanon.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The name of kanon's webhook configurations (one Mutating, one Validating).
*/}}
{{- define "kanon.webhookConfigurationName" -}}
{{- include "kanon.fullname" . }}
{{- end }}

{{/*
The Secret holding the webhook's certificate (and, in kanon mode, its CA).
*/}}
{{- define "kanon.certSecretName" -}}
{{- printf "%s-tls" (include "kanon.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespaces whose objects never reach kanon: the configured ones and kanon's own.
*/}}
{{- define "kanon.excludedNamespaces" -}}
{{- $namespaces := .Values.webhook.excludedNamespaces | default list }}
{{- if not (has .Release.Namespace $namespaces) }}
{{- $namespaces = append $namespaces .Release.Namespace }}
{{- end }}
{{- toJson $namespaces }}
{{- end }}

{{/*
The namespaceSelector of the workload webhooks: excluded namespaces and the opt-out label.
*/}}
{{- define "kanon.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ include "kanon.excludedNamespaces" . }}
  - key: {{ .Values.webhook.optOutLabel | quote }}
    operator: NotIn
    values: ["true"]
{{- end }}

{{/*
How kube-apiserver reaches kanon.
*/}}
{{- define "kanon.clientConfig" -}}
{{- if .root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
{{- else }}
service:
  name: {{ include "kanon.fullname" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: {{ .root.Values.service.port }}
{{- end }}
{{- end }}

{{/*
The webhook container's memory limit when resources.limits.memory is not set: the sum of what
kanon can hold at its bounds (values.yaml, `resources`), so that no client can push it past the
limit. In MiB.
*/}}
{{- define "kanon.memoryLimitMiB" -}}
{{- $s := .Values.serving }}
{{- $reviews := mul $s.maxConcurrentReviews 2 $s.maxReviewMemoryMiB }}
{{- $connections := div (add (mul $s.maxConnections 64) 1023) 1024 }}
{{- $programs := mul .Values.programs.workers .Values.programs.memoryMiB }}
{{- add $s.baseMiB $s.bodyBufferMiB $reviews $connections $programs .Values.lookups.objectCacheMiB }}
{{- end }}

{{/*
The webhook container's resources: as given, with the derived memory limit when none is.
*/}}
{{- define "kanon.resources" -}}
{{- $resources := deepCopy (default dict .Values.resources) }}
{{- $limits := default dict $resources.limits }}
{{- if not (hasKey $limits "memory") }}
{{- $_ := set $limits "memory" (printf "%sMi" (include "kanon.memoryLimitMiB" .)) }}
{{- end }}
{{- $_ := set $resources "limits" $limits }}
{{- toYaml $resources }}
{{- end }}

{{/*
library.podSecurity as a map of each mode's level (`enforce`, `warn`, `audit`: `none`, `baseline`
or `restricted`) with `namespaceLabels` and `exemptions`, as JSON: a level alone (as earlier charts
took it) is that level in the modes library.validationActions names (Deny: enforce, Warn: warn,
Audit: audit), Namespace labels not read.
*/}}
{{- define "kanon.podSecurity" -}}
{{- $library := .Values.library }}
{{- $podSecurity := $library.podSecurity }}
{{- if kindIs "string" $podSecurity }}
{{- $level := $podSecurity }}
{{- $podSecurity = dict "enforce" "none" "warn" "none" "audit" "none" "namespaceLabels" false }}
{{- if ne $level "none" }}
{{- range $mode, $action := dict "enforce" "Deny" "warn" "Warn" "audit" "Audit" }}
{{- if has $action $library.validationActions }}
{{- $_ := set $podSecurity $mode $level }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $mode := list "enforce" "warn" "audit" }}
{{- $_ := set $podSecurity $mode (get $podSecurity $mode | default "none") }}
{{- end }}
{{- toJson $podSecurity }}
{{- end }}
