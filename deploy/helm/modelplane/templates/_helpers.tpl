{{- define "modelplane.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "modelplane.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "modelplane.labels" -}}
app.kubernetes.io/name: modelplane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "modelplane.selector" -}}
app.kubernetes.io/name: modelplane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Pod security every process runs with: the image's non-root user, no
privilege escalation, a read-only root file system. */}}
{{- define "modelplane.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "modelplane.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{- define "modelplane.natsEnv" -}}
- name: MP_NATS_URL
  value: {{ required "nats.url is required" .Values.nats.url | quote }}
- name: MP_NATS_CREDS
  value: /etc/modelplane/nats/{{ .credsKey }}
{{- end -}}
