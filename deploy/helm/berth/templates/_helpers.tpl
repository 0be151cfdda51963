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

{{/* An image by digest where one is given (what runs is then exactly what was scanned), else by tag. */}}
{{- define "berth.image" -}}
{{- if .digest }}{{ .repository }}@{{ .digest }}{{ else }}{{ .repository }}:{{ .tag }}{{ end -}}
{{- end -}}

{{- define "berth.controlPlaneImage" -}}
{{ include "berth.image" .Values.image.controlPlane }}
{{- end -}}

{{- define "berth.nodeImage" -}}
{{ include "berth.image" .Values.image.node }}
{{- end -}}

{{/* A tag can be pushed again: pull it each start. A digest cannot change: the node's copy is the image. */}}
{{- define "berth.pullPolicy" -}}
{{- if .Values.image.pullPolicy }}{{ .Values.image.pullPolicy }}
{{- else if and .Values.image.controlPlane.digest .Values.image.node.digest }}IfNotPresent
{{- else }}Always{{ end -}}
{{- end -}}

{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ .Values.serviceAccount.name | default (include "berth.fullname" .) }}
{{- else }}{{ .Values.serviceAccount.name | default "default" }}{{ end -}}
{{- end -}}

{{/* What every pod of the chart shares: its service account without a token (Berth never calls the Kubernetes
API), the pull secrets and the pod's security context (restricted: non-root, RuntimeDefault seccomp). */}}
{{- define "berth.podSpecCommon" -}}
serviceAccountName: {{ include "berth.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Every container's: no privilege escalation, no capabilities, a read-only root file system. */}}
{{- define "berth.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end -}}

{{/* The root file system is read-only: /tmp is the one scratch place every process gets. */}}
{{- define "berth.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* Pass (dict "ctx" $ "size" …) for a size other than tmpSizeLimit. */}}
{{- define "berth.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .size | default .ctx.Values.tmpSizeLimit }}
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
{{ include "berth.temporalEnv" . }}
- name: BERTH_DATA_DIR
  value: /var/lib/berth
{{- end -}}

{{/* Where Temporal is and how Berth proves itself to it: every process that connects to Temporal reads these. The
client certificate, key and CA are files of a Secret mounted read-only (berth.temporalTlsVolume); the API key comes
from a Secret as a variable. */}}
{{- define "berth.temporalEnv" -}}
- name: BERTH_TEMPORAL_ADDRESS
  value: {{ .Values.temporal.address | quote }}
- name: BERTH_TEMPORAL_NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
{{- with .Values.temporal.tls }}
{{- if .enabled }}
- name: BERTH_TEMPORAL_TLS
  value: "true"
{{- end }}
{{- if .existingSecret }}
{{- if .certKey }}
- name: BERTH_TEMPORAL_TLS_CERT
  value: /etc/berth/temporal-tls/tls.crt
- name: BERTH_TEMPORAL_TLS_KEY
  value: /etc/berth/temporal-tls/tls.key
{{- end }}
{{- if .caKey }}
- name: BERTH_TEMPORAL_TLS_CA
  value: /etc/berth/temporal-tls/ca.crt
{{- end }}
{{- end }}
{{- with .serverName }}
- name: BERTH_TEMPORAL_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.temporal.apiKey }}
{{- if .existingSecret }}
- name: BERTH_TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .existingSecretKey }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "berth.temporalTlsMount" -}}
{{- if .Values.temporal.tls.existingSecret }}
- name: temporal-tls
  mountPath: /etc/berth/temporal-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Readable by the pod's group only (fsGroup), never written. */}}
{{- define "berth.temporalTlsVolume" -}}
{{- with .Values.temporal.tls }}
{{- if .existingSecret }}
{{- if and .certKey (not .keyKey) }}
{{- fail "temporal.tls.keyKey is required with temporal.tls.certKey: mutual TLS needs the client certificate's key" }}
{{- end }}
- name: temporal-tls
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      {{- if .certKey }}
      - key: {{ .certKey }}
        path: tls.crt
      - key: {{ .keyKey }}
        path: tls.key
      {{- end }}
      {{- if .caKey }}
      - key: {{ .caKey }}
        path: ca.crt
      {{- end }}
{{- end }}
{{- end }}
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
