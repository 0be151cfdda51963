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

{{/* Where Temporal is, and the data dir: every control-plane process reads these (the store's URL is a secret
file, berth.secretFiles). */}}
{{- define "berth.controlPlaneEnv" -}}
{{ include "berth.temporalEnv" . }}
- name: BERTH_DATA_DIR
  value: /var/lib/berth
{{- end -}}

{{/* Where Temporal is and how Berth proves itself to it: every process that connects to Temporal reads these. The
client certificate, key and CA are files of a Secret mounted read-only (berth.temporalTlsVolume); the API key is a
secret file (berth.secretFiles). */}}
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

{{/* The secrets one component reads, pass (dict "ctx" $ "component" "server"): a YAML list of the setting's
variable, the Secret and key holding it, and the file it is mounted as. Each reaches the process as a file under
/etc/berth/secrets, named by the setting's BERTH_<NAME>_FILE variable, never as the variable itself: a value in the
environment is in /proc/PID/environ, in every child process (a node's vLLM replicas) and in crash reports. */}}
{{- define "berth.secretFiles" -}}
{{- $ := .ctx }}
{{- $files := list }}
{{- if has .component (list "server" "worker") }}
{{- $key := ternary $.Values.database.existingSecretKey "url" (not (empty $.Values.database.existingSecret)) }}
{{- $files = append $files (dict "variable" "BERTH_DATABASE_URL" "secret" (include "berth.databaseSecret" $) "key" $key "file" "database-url") }}
{{- end }}
{{- if eq .component "server" }}
{{- $key := ternary $.Values.adminKey.existingSecretKey "admin-key" (not (empty $.Values.adminKey.existingSecret)) }}
{{- $files = append $files (dict "variable" "BERTH_ADMIN_KEY" "secret" (include "berth.adminKeySecret" $) "key" $key "file" "admin-key") }}
{{- end }}
{{- if eq .component "node" }}
{{- with $.Values.node.join }}
{{- if .poolTokenSecret }}
{{- /* A pool token (berth nodes pool-token create): each node of the pool is admitted as it joins. */}}
{{- $files = append $files (dict "variable" "BERTH_JOIN_TOKEN" "secret" .poolTokenSecret "key" .poolTokenSecretKey "file" "join-token") }}
{{- end }}
{{- end }}
{{- end }}
{{- if or (eq .component "server") (and (eq .component "node") (not $.Values.node.join.poolTokenSecret)) }}
{{- /* The cluster token: the server checks it, and a node that joins with it waits, pending, for berth nodes approve. */}}
{{- $key := ternary $.Values.joinToken.existingSecretKey "join-token" (not (empty $.Values.joinToken.existingSecret)) }}
{{- $files = append $files (dict "variable" "BERTH_JOIN_TOKEN" "secret" (include "berth.joinTokenSecret" $) "key" $key "file" "join-token") }}
{{- end }}
{{- if eq .component "tool-worker" }}
{{- /* It registers its agents through the API, so it holds a key (an `agent` key of its tenant). */}}
{{- $key := ternary $.Values.apiKey.existingSecretKey "api-key" (not (empty $.Values.apiKey.existingSecret)) }}
{{- $files = append $files (dict "variable" "BERTH_API_KEY" "secret" (include "berth.apiKeySecret" $) "key" $key "file" "api-key") }}
{{- end }}
{{- with $.Values.temporal.apiKey }}
{{- if .existingSecret }}
{{- $files = append $files (dict "variable" "BERTH_TEMPORAL_API_KEY" "secret" .existingSecret "key" .existingSecretKey "file" "temporal-api-key") }}
{{- end }}
{{- end }}
{{- toYaml $files }}
{{- end -}}

{{/* Each secret file's BERTH_<NAME>_FILE variable; pass what berth.secretFiles takes. */}}
{{- define "berth.secretFileEnv" -}}
{{- range include "berth.secretFiles" . | fromYamlArray }}
- name: {{ .variable }}_FILE
  value: /etc/berth/secrets/{{ .file }}
{{- end }}
{{- end -}}

{{- define "berth.secretsMount" -}}
- name: secrets
  mountPath: /etc/berth/secrets
  readOnly: true
{{- end -}}

{{/* The component's Secrets as files, in one projected volume: readable by the pod's group only (fsGroup 10001,
which the processes run as), never written. Pass what berth.secretFiles takes. */}}
{{- define "berth.secretsVolume" -}}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      {{- range include "berth.secretFiles" . | fromYamlArray }}
      - secret:
          name: {{ .secret }}
          items:
            - key: {{ .key }}
              path: {{ .file }}
      {{- end }}
{{- end -}}

{{- define "berth.apiUrl" -}}
http://{{ include "berth.fullname" . }}-server:{{ .Values.server.service.port }}
{{- end -}}
