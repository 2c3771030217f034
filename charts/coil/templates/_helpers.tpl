{{/* Common names and labels. */}}
{{- define "coil.labels" -}}
app.kubernetes.io/name: coil
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "coil.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "coil.webhookService" -}}coil-webhook-service{{- end }}
{{- define "coil.webhookSecret" -}}coil-webhook-server-cert{{- end }}

{{/* Generated RBAC rules (hack/generate.ts → files/rbac.yaml), by program. */}}
{{- define "coil.rbac" -}}
{{- .Files.Get "files/rbac.yaml" | fromYaml | toJson -}}
{{- end }}
