{{/* Names, labels and the shared pod/container security settings. */}}

{{- define "tidescale.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tidescale.name" -}}
{{- printf "%s-%s" (include "tidescale.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tidescale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidescale
{{- end -}}

{{- define "tidescale.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tidescale.componentLabels" -}}
{{ include "tidescale.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tidescale.servingNamespace" -}}
{{- default .Release.Namespace .Values.serving.namespace -}}
{{- end -}}

{{- define "tidescale.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "tidescale.authSecret" -}}
{{- default (printf "%s-auth" (include "tidescale.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "tidescale.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}{{ include "tidescale.fullname" . }}{{- else -}}default{{- end -}}
{{- end -}}

{{- define "tidescale.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* Pod spec fields every tidescale pod shares: non-root, no service account token unless needed. */}}
{{- define "tidescale.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An HTTP service container: image, security context, probes on /healthz and /readyz. */}}
{{- define "tidescale.container" -}}
{{- $v := .root.Values -}}
- name: {{ .component }}
  image: {{ include "tidescale.image" .root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  ports:
    - name: http
      containerPort: {{ .port }}
      protocol: TCP
  {{- with .env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  resources:
    {{- toYaml .resources | nindent 4 }}
  readinessProbe:
    httpGet: {path: {{ .readyPath | default "/healthz" }}, port: http}
    periodSeconds: 10
    timeoutSeconds: 3
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 3
    failureThreshold: 3
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- with .mounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* serving.selector as a Kubernetes label selector string (k1=v1,k2=v2), sorted. */}}
{{- define "tidescale.selectorString" -}}
{{- $parts := list -}}
{{- range $k, $v := .Values.serving.selector -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{- define "tidescale.exporterServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}{{ include "tidescale.fullname" . }}-exporter{{- else -}}default{{- end -}}
{{- end -}}

