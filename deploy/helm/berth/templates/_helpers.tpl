{{- define "berth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "berth.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: pass (dict "ctx" $ "component" "server"). */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "berth.controlPlaneImage" -}}
{{ .Values.image.controlPlane.repository }}:{{ .Values.image.controlPlane.tag }}
{{- end -}}

{{- define "berth.nodeImage" -}}
{{ .Values.image.node.repository }}:{{ .Values.image.node.tag }}
{{- end -}}

{{- define "berth.databaseSecret" -}}
{{- .Values.database.existingSecret | default (printf "%s-database" (include "berth.fullname" .)) -}}
{{- end -}}

{{- define "berth.joinTokenSecret" -}}
{{- .Values.joinToken.existingSecret | default (printf "%s-join-token" (include "berth.fullname" .)) -}}
{{- end -}}

{{- define "berth.adminKeySecret" -}}
{{- .Values.adminKey.existingSecret | default (printf "%s-admin-key" (include "berth.fullname" .)) -}}
{{- end -}}

{{/* The key Prometheus reads the API's /metrics with: a Secret of your own, or the admin key's. */}}
{{- define "berth.metricsKeySecret" -}}
{{- .Values.metrics.serviceMonitor.apiKeySecret | default (include "berth.adminKeySecret" .) -}}
{{- end -}}

{{- define "berth.metricsKeySecretKey" -}}
{{- if .Values.metrics.serviceMonitor.apiKeySecret }}{{ .Values.metrics.serviceMonitor.apiKeySecretKey }}
{{- else if .Values.adminKey.existingSecret }}{{ .Values.adminKey.existingSecretKey }}
{{- else }}admin-key{{ end -}}
{{- end -}}

{{- define "berth.apiKeySecret" -}}
{{- .Values.apiKey.existingSecret | default (printf "%s-api-key" (include "berth.fullname" .)) -}}
{{- end -}}

{{/* Where the control plane's store and Temporal are: every control-plane process reads these. */}}
{{- define "berth.controlPlaneEnv" -}}
- name: BERTH_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "berth.databaseSecret" . }}
      key: {{ if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}url{{ end }}
- name: BERTH_TEMPORAL_ADDRESS
  value: {{ .Values.temporal.address | quote }}
- name: BERTH_TEMPORAL_NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
- name: BERTH_DATA_DIR
  value: /var/lib/berth
{{- end -}}

{{- define "berth.joinTokenEnv" -}}
- name: BERTH_JOIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "berth.joinTokenSecret" . }}
      key: {{ if .Values.joinToken.existingSecret }}{{ .Values.joinToken.existingSecretKey }}{{ else }}join-token{{ end }}
{{- end -}}

{{- define "berth.apiUrl" -}}
http://{{ include "berth.fullname" . }}-server:{{ .Values.server.service.port }}
{{- end -}}
