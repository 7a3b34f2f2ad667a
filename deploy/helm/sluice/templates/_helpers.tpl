{{/* The objects' name: <release>-sluice, or the release's name when it already says sluice. */}}
{{- define "sluice.fullname" -}}
{{- if contains "sluice" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sluice" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret the chart makes for values given inline. */}}
{{- define "sluice.secretName" -}}
{{ include "sluice.fullname" . }}
{{- end -}}

{{- define "sluice.replicas" -}}
{{- if .Values.embedded -}}1{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{/* Refuse values that cannot run, with a sentence saying what to set. */}}
{{- define "sluice.validate" -}}
{{- if not .Values.embedded -}}
{{- if and (not .Values.redis.url) (not .Values.redis.existingSecret) -}}
{{- fail "sluice: set redis.url or redis.existingSecret (every replica must share one Redis), or embedded=true for a one-pod try-out" -}}
{{- end -}}
{{- if and (not .Values.database.url) (not .Values.database.existingSecret) -}}
{{- fail "sluice: set database.url or database.existingSecret (a postgres:// URL: every replica must share one catalog), or embedded=true for a one-pod try-out" -}}
{{- end -}}
{{- if and .Values.database.url (not (hasPrefix "postgres" .Values.database.url)) -}}
{{- fail "sluice: database.url must be a postgres:// or postgresql:// URL; SQLite is for embedded=true only" -}}
{{- end -}}
{{- end -}}
{{- if lt (int .Values.replicaCount) 1 -}}
{{- fail "sluice: replicaCount must be at least 1" -}}
{{- end -}}
{{- if lt (int .Values.redis.replicaAcks) 0 -}}
{{- fail "sluice: redis.replicaAcks must be 0 or more" -}}
{{- end -}}
{{- end -}}
