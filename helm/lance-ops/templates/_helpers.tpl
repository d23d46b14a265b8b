{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "lance-ops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name used as the prefix of every object: <release>-<chart> unless the release name already
contains the chart name, or fullnameOverride is set.
*/}}
{{- define "lance-ops.fullname" -}}
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
chart label value: name-version.
*/}}
{{- define "lance-ops.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable across upgrades.
*/}}
{{- define "lance-ops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lance-ops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Standard labels for every object.
*/}}
{{- define "lance-ops.labels" -}}
helm.sh/chart: {{ include "lance-ops.chart" . }}
{{ include "lance-ops.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lance-ops
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Name of the ServiceAccount for Spark drivers and the CronJob.
*/}}
{{- define "lance-ops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lance-ops.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Namespace of the Spark driver/executor pods.
*/}}
{{- define "lance-ops.sparkNamespace" -}}
{{- default .Release.Namespace .Values.spark.namespace }}
{{- end }}

{{/*
Image reference: repository[:tag][@digest]; tag defaults to the chart appVersion.
*/}}
{{- define "lance-ops.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag | toString }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Image for the Spark driver and executor pods (defaults to the main image).
*/}}
{{- define "lance-ops.sparkImage" -}}
{{- if or .Values.spark.image.repository .Values.spark.image.tag }}
{{- $repo := default .Values.image.repository .Values.spark.image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.spark.image.tag | toString }}
{{- printf "%s:%s" $repo $tag }}
{{- else }}
{{- include "lance-ops.image" . }}
{{- end }}
{{- end }}

{{/*
Object names.
*/}}
{{- define "lance-ops.envConfigMapName" -}}
{{- printf "%s-env" (include "lance-ops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lance-ops.sparkConfigMapName" -}}
{{- printf "%s-spark-conf" (include "lance-ops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lance-ops.roleName" -}}
{{- printf "%s-spark" (include "lance-ops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the Secret the pods read env entries from: existingSecret, the rendered one, or empty.
*/}}
{{- define "lance-ops.secretName" -}}
{{- if and .Values.secret.create .Values.secret.existingSecret }}
{{- fail "set either secret.create or secret.existingSecret, not both" }}
{{- end }}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else if .Values.secret.create }}
{{- printf "%s-secret" (include "lance-ops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
POSIX shell single-quoting of one word (embedded quotes become '\'' ).
*/}}
{{- define "lance-ops.shquote" -}}
{{- printf "'%s'" (replace "'" "'\\''" (toString .)) }}
{{- end }}

{{/*
AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST value (JSON list) for the git bundle, optionally
followed by the image's dags folder as a LocalDagBundle.
*/}}
{{- define "lance-ops.dagBundleConfigList" -}}
{{- $git := .Values.dags.gitBundle }}
{{- $kwargs := dict "repo_url" $git.repoUrl "tracking_ref" $git.trackingRef "refresh_interval" (int $git.refreshInterval) }}
{{- if $git.subdir }}{{- $_ := set $kwargs "subdir" $git.subdir }}{{- end }}
{{- if $git.gitConnId }}{{- $_ := set $kwargs "git_conn_id" $git.gitConnId }}{{- end }}
{{- $bundles := list (dict "name" $git.name "classpath" "airflow.providers.git.bundles.git.GitDagBundle" "kwargs" $kwargs) }}
{{- if $git.includeImageDags }}
{{- $bundles = append $bundles (dict "name" "dags-folder" "classpath" "airflow.dag_processing.bundles.local.LocalDagBundle" "kwargs" (dict "path" .Values.dags.imagePath)) }}
{{- end }}
{{- toJson $bundles }}
{{- end }}

{{/*
The env/envFrom block shared by pods of this chart: ConfigMap first, Secret second (so a key in
the Secret wins over the same key in the ConfigMap).
*/}}
{{- define "lance-ops.envFrom" -}}
- configMapRef:
    name: {{ include "lance-ops.envConfigMapName" . }}
{{- with (include "lance-ops.secretName" .) }}
- secretRef:
    name: {{ . }}
{{- end }}
{{- end }}
