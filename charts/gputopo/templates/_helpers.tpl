{{/* Chart name, truncated to fit a DNS label. */}}
{{- define "gputopo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name, with the chart name appended unless the release name already holds it. */}}
{{- define "gputopo.fullname" -}}
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

{{- define "gputopo.operator.fullname" -}}
{{- printf "%s-operator" (include "gputopo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gputopo.probe.fullname" -}}
{{- printf "%s-probe" (include "gputopo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gputopo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gputopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gputopo
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "operator"). */}}
{{- define "gputopo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gputopo.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gputopo.componentLabels" -}}
{{ include "gputopo.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gputopo.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "gputopo.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gputopo.probe.serviceAccountName" -}}
{{- if .Values.probe.serviceAccount.create }}
{{- default (include "gputopo.probe.fullname" .) .Values.probe.serviceAccount.name }}
{{- else }}
{{- .Values.probe.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gputopo.peeringName" -}}
{{- default (include "gputopo.fullname" .) .Values.operator.leaderElection.peeringName }}
{{- end }}

{{/* An image reference: call with (dict "image" .Values.operator.image "ctx" $). The digest wins over the tag. */}}
{{- define "gputopo.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/*
Cross-field rules the schema cannot express. Rendered from every template that depends on them, so that
`helm template`, `helm install` and `helm upgrade` refuse the same values with the same message.
*/}}
{{- define "gputopo.validate" -}}
{{- $op := .Values.operator }}
{{- $probe := .Values.probe }}
{{- if and (gt (int $op.replicas) 1) (not $op.leaderElection.enabled) }}
{{- fail (printf "operator.replicas is %d but operator.leaderElection.enabled is false: replicas would handle the same events twice; enable leader election or set operator.replicas to 1" (int $op.replicas)) }}
{{- end }}
{{- if and (not $op.serviceAccount.create) (not $op.serviceAccount.name) }}
{{- fail "operator.serviceAccount.create is false, so operator.serviceAccount.name must name an existing ServiceAccount" }}
{{- end }}
{{- if and $probe.enabled (not $probe.serviceAccount.create) (not $probe.serviceAccount.name) }}
{{- fail "probe.serviceAccount.create is false, so probe.serviceAccount.name must name an existing ServiceAccount" }}
{{- end }}
{{- if and $probe.enabled (not $probe.nodeSelector) (not $probe.affinity) }}
{{- fail "probe.nodeSelector and probe.affinity are both empty: the probe would run on every node, GPU or not; select the GPU nodes (for example probe.nodeSelector.nvidia\\.com/gpu\\.present=true)" }}
{{- end }}
{{- if and $probe.enabled $probe.fake (not $probe.testCluster) }}
{{- fail (printf "probe.fake is %q but probe.testCluster is false: fake mode publishes made-up GPUs and, with fakeAllocation kubelet or dra, writes into the kubelet's directories as root; it is for test clusters (kind, kwok) only: set probe.testCluster=true there, or leave probe.fake empty" $probe.fake) }}
{{- end }}
{{- $over := $op.config.tierOversubscription }}
{{- if and $over (ne (len $over) (len $op.config.tierLabels)) }}
{{- fail (printf "operator.config.tierOversubscription has %d values but operator.config.tierLabels has %d: give one oversubscription per tier label, in the same order" (len $over) (len $op.config.tierLabels)) }}
{{- end }}
{{- $pdb := $op.podDisruptionBudget }}
{{- if and $pdb.enabled (gt (int $op.replicas) 1) (not (kindIs "string" $pdb.minAvailable)) (ge (int $pdb.minAvailable) (int $op.replicas)) }}
{{- fail (printf "operator.podDisruptionBudget.minAvailable (%d) must be less than operator.replicas (%d), or no node running the operator could ever be drained" (int $pdb.minAvailable) (int $op.replicas)) }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) }}
{{- fail "metrics.serviceMonitor.enabled is true but the cluster does not serve monitoring.coreos.com/v1 ServiceMonitor: install the Prometheus Operator first (with helm template, pass --api-versions monitoring.coreos.com/v1/ServiceMonitor)" }}
{{- end }}
{{- if and .Values.metrics.prometheusRule.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) }}
{{- fail "metrics.prometheusRule.enabled is true but the cluster does not serve monitoring.coreos.com/v1 PrometheusRule: install the Prometheus Operator first (with helm template, pass --api-versions monitoring.coreos.com/v1/PrometheusRule)" }}
{{- end }}
{{- if and .Values.gangs.enabled (semverCompare "<1.36-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "gangs.enabled is true but the cluster runs Kubernetes %s: the placement gate is an admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, served from 1.36; set gangs.enabled=false (gangs gputopo does not own are then placed by kube-scheduler alone)" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
