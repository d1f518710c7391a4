{{/* Names, labels and the shared pod/container security settings. */}}

{{/* The chart's name for labels and object names: nameOverride replaces the chart name. */}}
{{- define "tidescale.appName" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tidescale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tidescale.appName" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Where the release's own namespaced objects go: namespaceOverride (umbrella charts), else the release's. */}}
{{- define "tidescale.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* <.base>-<.suffix> in at most .max characters (63 unless given: a Service name is a DNS label; a
     CronJob's 52 leave room for its Jobs' suffix), the suffix kept whole: a longer base is cut and a
     hash of the whole name added. Cutting the joined name instead gave a 53-character release name
     (helm's longest) one name for every component's objects. */}}
{{- define "tidescale.joinName" -}}
{{- $name := printf "%s-%s" .base .suffix -}}
{{- $max := int (.max | default 63) -}}
{{- if gt (len $name) $max -}}
{{- $name = printf "%s-%s-%s" (trunc (int (sub $max (add 7 (len .suffix)))) .base | trimSuffix "-") (sha256sum $name | trunc 5) .suffix -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* <fullname>-<.component> (at most .max characters, `tidescale.joinName`): a component's objects. */}}
{{- define "tidescale.name" -}}
{{- include "tidescale.joinName" (dict "base" (include "tidescale.fullname" .root) "suffix" .component "max" .max) -}}
{{- end -}}

{{/* The labels of every object: commonLabels first, the chart's own winning (a selector label must not move). */}}
{{- define "tidescale.labels" -}}
{{- $own := dict "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_")
      "app.kubernetes.io/name" (include "tidescale.appName" .) "app.kubernetes.io/instance" .Release.Name
      "app.kubernetes.io/version" .Chart.AppVersion "app.kubernetes.io/managed-by" .Release.Service
      "app.kubernetes.io/part-of" "tidescale" -}}
{{- toYaml (merge $own (deepCopy (.Values.commonLabels | default dict))) -}}
{{- end -}}

{{- define "tidescale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidescale.appName" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tidescale.componentLabels" -}}
{{ include "tidescale.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tidescale.servingNamespace" -}}
{{- default (include "tidescale.namespace" .) .Values.serving.namespace -}}
{{- end -}}

{{/* [registry/]repository@digest when image.digest is set (immutable), else [registry/]repository:tag (tag
     defaults to appVersion). global.imageRegistry (an umbrella chart's) replaces image.registry. */}}
{{- define "tidescale.image" -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default .Values.image.registry -}}
{{- $repository := ternary (printf "%s/%s" (trimSuffix "/" $registry) .Values.image.repository) .Values.image.repository (ne $registry "") -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets and global.imagePullSecrets (names or {name: ...}), as a list of {name: ...}. */}}
{{- define "tidescale.imagePullSecrets" -}}
{{- $out := list -}}
{{- range concat .Values.imagePullSecrets ((.Values.global | default dict).imagePullSecrets | default list) -}}
{{- $entry := ternary (dict "name" .) . (kindIs "string" .) -}}
{{- if not (has $entry $out) }}{{ $out = append $out $entry }}{{ end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* "true" when the chart may read the cluster with `lookup` (clusterLookups); `auto` values are settled
     without it otherwise. */}}
{{- define "tidescale.lookups" -}}
{{- if .Values.clusterLookups }}true{{ end -}}
{{- end -}}

{{- define "tidescale.authSecret" -}}
{{- default (printf "%s-auth" (include "tidescale.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* One random bearer token of the chart's auth Secret (base64; .key: exporter-token or reviews-token):
     the live Secret's, kept across upgrades (`lookup` in the release namespace), else a new one drawn
     once per render, so every copy of it in this render (the AlertmanagerConfig's) is the same. */}}
{{- define "tidescale.authToken" -}}
{{- $root := .root -}}
{{- if not (hasKey $root.Values "_tokens") -}}
{{- $live := lookup "v1" "Secret" (include "tidescale.namespace" $root) (include "tidescale.authSecret" $root) -}}
{{- $data := dict -}}
{{- if $live }}{{ $data = $live.data }}{{ end -}}
{{- $_ := set $root.Values "_tokens" (dict "exporter-token" (get $data "exporter-token" | default (randAlphaNum 40 | b64enc))
      "reviews-token" (get $data "reviews-token" | default (randAlphaNum 40 | b64enc))) -}}
{{- end -}}
{{- get $root.Values._tokens .key -}}
{{- end -}}

{{/* The account of the pods without API access: serviceAccount.name (created, or an existing one with
     create=false), else <fullname> when created, else the namespace's default account. */}}
{{- define "tidescale.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tidescale.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tidescale.hasPrometheusOperator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* Pod template metadata: the chart's labels and annotations over the component's podLabels/podAnnotations
     over the global ones (the selector labels always win: a pod label must not detach a pod from its
     Deployment). Takes root, component, values (the component's values; empty for the CronJob), annotations. */}}
{{- define "tidescale.podMetadata" -}}
{{- $v := .root.Values -}}
{{- $c := .values | default dict -}}
{{- $labels := merge (include "tidescale.componentLabels" . | fromYaml) (deepCopy ($c.podLabels | default dict)) (deepCopy $v.podLabels) -}}
{{- $annotations := merge (deepCopy (.annotations | default dict)) (deepCopy ($c.podAnnotations | default dict)) (deepCopy $v.podAnnotations) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod spec fields every tidescale pod shares: non-root, scheduling (the component's priorityClassName and
     topologySpreadConstraints replace the global ones; a constraint without labelSelector gets the
     component's selector labels). Takes root, component, values. */}}
{{- define "tidescale.podCommon" -}}
{{- $v := .root.Values -}}
{{- $c := .values | default dict -}}
{{- with include "tidescale.imagePullSecrets" .root | fromYamlArray }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.dnsPolicy }}
dnsPolicy: {{ . }}
{{- end }}
{{- with $v.dnsConfig }}
dnsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with $c.priorityClassName | default $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.topologySpreadConstraints | default $v.topologySpreadConstraints }}
{{- $selector := dict "matchLabels" (include "tidescale.selectorLabels" $ | fromYaml) }}
topologySpreadConstraints:
  {{- range $tsc := . }}
  - {{- toYaml (merge (deepCopy $tsc) (dict "labelSelector" $selector)) | nindent 4 }}
  {{- end }}
{{- end }}
{{- with $c.nodeSelector | default $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations | default $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity | default $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An HTTP service container: image, security context, probes on /healthz and /readyz at the component's
     healthPort (a listener of their own, which client load cannot exhaust); the component's extraArgs, extraEnv
     and extraVolumeMounts come after the chart's own. Takes root, component, values, port, args, env, mounts,
     readyPath. */}}
{{- define "tidescale.container" -}}
{{- $v := .root.Values -}}
{{- $c := .values -}}
{{- if eq (int $c.healthPort) (int .port) }}
{{- fail (printf "%s.healthPort must differ from %s.port (%v)" .component .component .port) }}
{{- end }}
- name: {{ .component }}
  image: {{ include "tidescale.image" .root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    {{- toYaml (concat .args (list "--health-port" (toString $c.healthPort)) $c.extraArgs) | nindent 4 }}
  ports:
    - name: http
      containerPort: {{ .port }}
      protocol: TCP
    {{- /* The probes' own listener: outside the client connection cap, in no Service. */}}
    - name: health
      containerPort: {{ $c.healthPort }}
      protocol: TCP
  {{- with concat .env $c.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  resources:
    {{- toYaml $c.resources | nindent 4 }}
  {{- /* The component's readinessProbe / livenessProbe are merged over these (a key set to null drops one). */}}
  {{- $ready := dict "httpGet" (dict "path" "/readyz" "port" "health") "periodSeconds" 10 "timeoutSeconds" 3 }}
  {{- $live := dict "httpGet" (dict "path" "/healthz" "port" "health") "initialDelaySeconds" 10 "periodSeconds" 20
        "timeoutSeconds" 3 "failureThreshold" 3 }}
  readinessProbe:
    {{- toYaml (mergeOverwrite $ready (deepCopy ($c.readinessProbe | default dict))) | nindent 4 }}
  livenessProbe:
    {{- toYaml (mergeOverwrite $live (deepCopy ($c.livenessProbe | default dict))) | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- with concat .mounts $c.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- with $c.extraContainers }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A component's Service on its port `http` (.root, .ctx, .port, .values: the component's, for service.annotations). */}}
{{- define "tidescale.service" -}}
{{- $name := include "tidescale.name" (dict "root" .root "component" (printf "%s%s" .ctx.component (.suffix | default ""))) -}}
{{- $letterFirst := semverCompare "<1.36-0" .root.Capabilities.KubeVersion.Version -}}
{{- if not (regexMatch (ternary "^[a-z]([-a-z0-9]*[a-z0-9])?$" "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $letterFirst) $name) -}}
{{- fail (printf "the Service name %q is not one Kubernetes %s accepts: it must be a DNS label (lower-case letters, digits and '-'; no dots%s). It is made from the release name: choose another, or set fullnameOverride" $name .root.Capabilities.KubeVersion.Version (ternary "; a letter first before Kubernetes 1.36" "" $letterFirst)) -}}
{{- end -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ include "tidescale.namespace" .root }}
  labels:
    {{- include "tidescale.componentLabels" .ctx | nindent 4 }}
  {{- with .values.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with .spec }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  selector:
    {{- include "tidescale.selectorLabels" .ctx | nindent 4 }}
  ports:
    - name: {{ .portName | default "http" }}
      port: {{ .port }}
      targetPort: http
      protocol: TCP
{{- end -}}

{{/* Where the exporter mounts exporter.traceFiles.hostPath. */}}
{{- define "tidescale.traceDir" -}}
/var/run/tidescale/traces
{{- end -}}

{{/* serving.selector as a Kubernetes label selector string (k1=v1,k2=v2), sorted. */}}
{{- define "tidescale.selectorString" -}}
{{- $parts := list -}}
{{- range $k, $v := .Values.serving.selector -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* The exporter's account (the one bound to the pod-reading Role): its own when the chart creates them. */}}
{{- define "tidescale.exporterServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "tidescale.joinName" (dict "base" (include "tidescale.serviceAccount" .) "suffix" "exporter") -}}
{{- else -}}
{{- include "tidescale.serviceAccount" . -}}
{{- end -}}
{{- end -}}

{{/* The review service's account when it posts Events: <account>-reviews when created, else the given one. */}}
{{- define "tidescale.reviewsServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "tidescale.joinName" (dict "base" (include "tidescale.serviceAccount" .) "suffix" "reviews") -}}
{{- else -}}
{{- include "tidescale.serviceAccount" . -}}
{{- end -}}
{{- end -}}

{{/* model -> namespace/deployment for review Events (YAML): autoscaling.targets in the serving namespace,
     then reviews.kubeEvents.modelDeployments (a bare name is in the serving namespace), which wins. */}}
{{- define "tidescale.modelDeployments" -}}
{{- $ns := include "tidescale.servingNamespace" . -}}
{{- $out := dict -}}
{{- range .Values.autoscaling.targets -}}
{{- if .model -}}{{- $_ := set $out .model (printf "%s/%s" $ns .deployment) -}}{{- end -}}
{{- end -}}
{{- range $model, $target := .Values.reviews.kubeEvents.modelDeployments -}}
{{- $_ := set $out $model (ternary $target (printf "%s/%s" $ns $target) (contains "/" $target)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Whether an installed CRD's schema has a field, read with `lookup`: "true", "false", or "" when the CRD
     cannot be looked up (not installed, clusterLookups false, or `helm template`, which cannot look). .crd: the CRD's name;
     .path: the keys from a served version down to the properties that should hold .field. */}}
{{- define "tidescale.crdHasField" -}}
{{- $crd := dict -}}
{{- if include "tidescale.lookups" .root }}{{ $crd = lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .crd }}{{ end -}}
{{- if $crd -}}
{{- $found := false -}}
{{- range $v := $crd.spec.versions -}}
{{- $props := $v -}}
{{- range $.path -}}{{- $props = get ($props | default dict) . -}}{{- end -}}
{{- if hasKey ($props | default dict) $.field -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- ternary "true" "false" $found -}}
{{- end -}}
{{- end -}}

{{/* "true" when a PodMonitor may use podMetricsEndpoints[].portNumber: monitoring.triton.portNumber
     true/false, or with "auto" whether the installed PodMonitor CRD has the field (`lookup`; under
     `helm template`, which cannot look, the current operator's field). */}}
{{- define "tidescale.podMonitorPortNumber" -}}
{{- $choice := toString .Values.monitoring.triton.portNumber -}}
{{- if eq $choice "auto" -}}
{{- $path := list "schema" "openAPIV3Schema" "properties" "spec" "properties" "podMetricsEndpoints" "items" "properties" -}}
{{- if ne (include "tidescale.crdHasField" (dict "root" . "crd" "podmonitors.monitoring.coreos.com" "path" $path "field" "portNumber")) "false" -}}true{{- end -}}
{{- else if eq $choice "true" -}}true
{{- end -}}
{{- end -}}

{{/* "true" when the Kubernetes label selector .selector (matchLabels and matchExpressions) selects
     .labels; an empty selector selects everything, an unknown operator nothing. */}}
{{- define "tidescale.selects" -}}
{{- $labels := .labels | default dict -}}
{{- $selector := .selector | default dict -}}
{{- $ok := true -}}
{{- range $k, $v := $selector.matchLabels | default dict -}}
{{- if or (not (hasKey $labels $k)) (ne (toString (get $labels $k)) (toString $v)) }}{{ $ok = false }}{{ end -}}
{{- end -}}
{{- range $e := $selector.matchExpressions | default list -}}
{{- $has := hasKey $labels $e.key -}}
{{- $in := false -}}
{{- range $e.values | default list }}{{ if and $has (eq (toString .) (toString (get $labels $e.key))) }}{{ $in = true }}{{ end }}{{ end -}}
{{- if eq $e.operator "In" }}{{ if not $in }}{{ $ok = false }}{{ end -}}
{{- else if eq $e.operator "NotIn" }}{{ if $in }}{{ $ok = false }}{{ end -}}
{{- else if eq $e.operator "Exists" }}{{ if not $has }}{{ $ok = false }}{{ end -}}
{{- else if eq $e.operator "DoesNotExist" }}{{ if $has }}{{ $ok = false }}{{ end -}}
{{- else }}{{ $ok = false }}{{ end -}}
{{- end -}}
{{- if $ok }}true{{ end -}}
{{- end -}}

{{/* "true" when a Prometheus resource of the operator (.prometheus) loads the ServiceMonitor .monitor:
     its serviceMonitorSelector (absent: none) selects the monitor's labels, and its
     serviceMonitorNamespaceSelector (absent: its own namespace) the monitor's namespace (.namespaces:
     namespace -> labels, filled by the caller). */}}
{{- define "tidescale.prometheusLoads" -}}
{{- $spec := .prometheus.spec | default dict -}}
{{- $ns := .monitor.metadata.namespace -}}
{{- if hasKey $spec "serviceMonitorSelector" -}}
{{- $inNamespace := eq $ns .prometheus.metadata.namespace -}}
{{- if hasKey $spec "serviceMonitorNamespaceSelector" -}}
{{- $inNamespace = include "tidescale.selects" (dict "selector" $spec.serviceMonitorNamespaceSelector "labels" (get .namespaces $ns)) -}}
{{- end -}}
{{- if and $inNamespace (include "tidescale.selects" (dict "selector" $spec.serviceMonitorSelector "labels" .monitor.metadata.labels)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* namespace/name of the ServiceMonitors outside this release that already scrape dcgm-exporter's metrics
     port for a Prometheus: a Prometheus resource loads the monitor (tidescale.prometheusLoads), the
     monitor reaches the Service's namespace (namespaceSelector any / matchNames / its own, only its own
     under that Prometheus' ignoreNamespaceSelectors), its selector (matchLabels and matchExpressions)
     selects the Service, and an endpoint names the port (or its targetPort). Found with `lookup`: empty
     with clusterLookups false, under `helm template` (no cluster), or when nothing qualifies. */}}
{{- define "tidescale.dcgmScrapedBy" -}}
{{- if include "tidescale.lookups" . -}}
{{- $m := .Values.monitoring.dcgmExporter -}}
{{- $ports := list -}}
{{- range $s := (lookup "v1" "Service" $m.namespace "").items | default list -}}
{{- if include "tidescale.selects" (dict "selector" (dict "matchLabels" $m.selector) "labels" $s.metadata.labels) -}}
{{- range $p := $s.spec.ports | default list -}}
{{- if or (eq (toString $p.name) (toString $m.port)) (eq (toString $p.port) (toString $m.port)) -}}
{{- $ports = append $ports (dict "service" $s "port" $p) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $prometheuses := (lookup "monitoring.coreos.com/v1" "Prometheus" "" "").items | default list -}}
{{- $namespaces := dict -}}
{{- $found := list -}}
{{- range $sm := (lookup "monitoring.coreos.com/v1" "ServiceMonitor" "" "").items | default list -}}
{{- $ours := and (eq (dig "metadata" "labels" "app.kubernetes.io/instance" "" $sm) $.Release.Name) (eq (dig "metadata" "labels" "app.kubernetes.io/part-of" "" $sm) "tidescale") -}}
{{- if and $ports (not $ours) -}}
{{- $smNs := $sm.metadata.namespace -}}
{{- if not (hasKey $namespaces $smNs) -}}
{{- $_ := set $namespaces $smNs ((lookup "v1" "Namespace" "" $smNs).metadata | default dict).labels -}}
{{- end -}}
{{- range $prom := $prometheuses -}}
{{- if include "tidescale.prometheusLoads" (dict "prometheus" $prom "monitor" $sm "namespaces" $namespaces) -}}
{{- $nsSel := $sm.spec.namespaceSelector | default dict -}}
{{- $ignore := dig "spec" "ignoreNamespaceSelectors" false $prom -}}
{{- range $target := $ports -}}
{{- $svc := $target.service -}}
{{- $reaches := eq $svc.metadata.namespace $smNs -}}
{{- if and (not $ignore) (or $nsSel.any $nsSel.matchNames) -}}
{{- $reaches = or $nsSel.any (has $svc.metadata.namespace ($nsSel.matchNames | default list)) -}}
{{- end -}}
{{- $named := false -}}
{{- range $ep := $sm.spec.endpoints | default list -}}
{{- if or (and $ep.port (eq (toString $ep.port) (toString $target.port.name))) (and $ep.targetPort (or (eq (toString $ep.targetPort) (toString $target.port.targetPort)) (eq (toString $ep.targetPort) (toString $target.port.port)))) -}}
{{- $named = true -}}
{{- end -}}
{{- end -}}
{{- if and $reaches $named (include "tidescale.selects" (dict "selector" $sm.spec.selector "labels" $svc.metadata.labels)) -}}
{{- $found = append $found (printf "%s/%s" $smNs $sm.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $found | uniq | join ", " -}}
{{- end -}}
{{- end -}}

{{/* The recommender's prometheus_auth settings (YAML): files under /etc/tidescale-prometheus, where the
     projected volume of recommender.prometheusAuth's Secrets puts them. */}}
{{- define "tidescale.prometheusAuthSettings" -}}
{{- $a := .Values.recommender.prometheusAuth -}}
{{- $out := dict -}}
{{- if $a.bearerTokenSecret.name }}{{- $_ := set $out "bearer_token_file" "/etc/tidescale-prometheus/token" }}{{- end -}}
{{- if $a.basicAuthSecret.name }}{{- $_ := set $out "basic_auth_password_file" "/etc/tidescale-prometheus/password" }}{{- end -}}
{{- if $a.caSecret.name }}{{- $_ := set $out "ca_file" "/etc/tidescale-prometheus/ca.crt" }}{{- end -}}
{{- with $a.tenant }}{{- $_ := set $out "tenant" . }}{{- end -}}
{{- with $a.headers }}{{- $_ := set $out "headers" . }}{{- end -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}

{{/* A PodDisruptionBudget keeping one pod of a component that runs several replicas (.root, .component). */}}
{{- define "tidescale.podDisruptionBudget" -}}
{{- $ctx := dict "root" .root "component" .component }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "tidescale.name" $ctx }}
  namespace: {{ include "tidescale.namespace" .root }}
  labels:
    {{- include "tidescale.componentLabels" $ctx | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "tidescale.selectorLabels" $ctx | nindent 6 }}
{{- end -}}

{{/* The headers every query to Prometheus carries, as "Name=value" (YAML list): the tenant
     (X-Scope-OrgID) first, then recommender.prometheusAuth.headers. */}}
{{- define "tidescale.prometheusHeaders" -}}
{{- $a := .Values.recommender.prometheusAuth -}}
{{- $headers := list -}}
{{- with $a.tenant }}{{- $headers = append $headers (printf "X-Scope-OrgID=%s" .) }}{{- end -}}
{{- range $k, $v := $a.headers }}{{- $headers = append $headers (printf "%s=%s" $k $v) }}{{- end -}}
{{- toYaml $headers -}}
{{- end -}}

{{/* A Prometheus duration (1m30s, 500ms) in milliseconds. */}}
{{- define "tidescale.durationMs" -}}
{{- $factors := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 -}}
{{- $total := 0 -}}
{{- range $part := regexFindAll "[0-9]+(ms|s|m|h)" . -1 -}}
{{- $unit := regexFind "(ms|s|m|h)$" $part -}}
{{- $total = add $total (mul (trimSuffix $unit $part | int64) (get $factors $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* A monitor endpoint's scrapeTimeout and metricRelabelings (monitoring.triton / exporter / dcgmExporter);
     relabelings are added by the monitor itself, after the chart's own. Takes name, monitor, interval. A
     timeout longer than the interval is refused here: Prometheus would reject the scrape config. */}}
{{- define "tidescale.scrapeExtras" -}}
{{- with .monitor.scrapeTimeout }}
{{- if gt (include "tidescale.durationMs" . | int64) (include "tidescale.durationMs" $.interval | int64) }}
{{- fail (printf "monitoring.%s.scrapeTimeout (%s) is longer than %s (%s)" $.name . ($.intervalName | default "monitoring.interval") $.interval) }}
{{- end }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .monitor.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A ServiceMonitor on the chart's own Services (port http): those of *component*, else all but
     *excluded*. Each target's job is tidescale-<component> whatever the release is called (the
     rules select up{job="tidescale-exporter"}); honorLabels keeps the namespace (and pod) each series
     is about. Takes root, name (the monitoring.<name> values: scrapeTimeout, metricRelabelings,
     relabelings after the chart's job relabeling), suffix, component, excluded, monitor, interval,
     intervalName. */}}
{{- define "tidescale.componentMonitor" -}}
{{- $root := .root -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "tidescale.fullname" $root }}{{ .suffix }}
  namespace: {{ include "tidescale.namespace" $root }}
  labels:
    {{- include "tidescale.labels" $root | nindent 4 }}
    {{- with $root.Values.monitoring.additionalLabels }}{{ toYaml . | nindent 4 }}{{ end }}
spec:
  namespaceSelector:
    matchNames: [{{ (include "tidescale.namespace" $root) | quote }}]
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ $root.Release.Name }}
      app.kubernetes.io/part-of: tidescale
      {{- with .component }}
      app.kubernetes.io/component: {{ . }}
      {{- end }}
    {{- with .excluded }}
    matchExpressions:
      - {key: app.kubernetes.io/component, operator: NotIn, values: {{ toJson . }}}
    {{- end }}
  endpoints:
    - port: http
      path: /metrics
      interval: {{ .interval }}
      honorLabels: true
      {{- with include "tidescale.scrapeExtras" (dict "name" .name "monitor" .monitor "interval" .interval "intervalName" .intervalName) }}{{ . | nindent 6 }}{{ end }}
      relabelings:
        - sourceLabels: [__meta_kubernetes_service_label_app_kubernetes_io_component]
          targetLabel: job
          replacement: tidescale-$1
        {{- with .monitor.relabelings }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/* extraObjects: each item a manifest (map) or a string, rendered with tpl against the release. */}}
{{- define "tidescale.extraObject" -}}
{{- if kindIs "string" .object -}}
{{- tpl .object .root -}}
{{- else -}}
{{- tpl (toYaml .object) .root -}}
{{- end -}}
{{- end -}}

{{- /* The HPA that applies one autoscaling.targets[] entry's answer: its hpaName (an HPA taken over in
     place), else the Deployment's name; the recommender reads the same one (config.yaml's hpa_name). */}}
{{- define "tidescale.hpaName" -}}
{{ .hpaName | default .deployment }}
{{- end }}

{{- /* "true" when the HPA's behavior.*.tolerance must be left out (and the recommender round instead):
       autoscaling.legacyTolerance when set, else the cluster version (the gate is on from 1.34). */}}
{{- define "tidescale.legacyTolerance" -}}
{{- $set := .Values.autoscaling.legacyTolerance -}}
{{- if kindIs "bool" $set -}}
{{- ternary "true" "false" $set -}}
{{- else if semverCompare "<1.34-0" .Capabilities.KubeVersion.Version -}}true
{{- else if and (eq .Values.autoscaling.mode "keda") (include "tidescale.kedaLacksTolerance" .) -}}true
{{- else -}}false
{{- end -}}
{{- end -}}

{{/* "true" when the installed KEDA's ScaledObject CRD has no behavior.*.tolerance (KEDA built against
     Kubernetes APIs older than 1.33 would drop the field); empty when it has it, or under
     `helm template`, which cannot look. */}}
{{- define "tidescale.kedaLacksTolerance" -}}
{{- $path := list "schema" "openAPIV3Schema" "properties" "spec" "properties" "advanced" "properties"
      "horizontalPodAutoscalerConfig" "properties" "behavior" "properties" "scaleUp" "properties" -}}
{{- if eq (include "tidescale.crdHasField" (dict "root" . "crd" "scaledobjects.keda.sh" "path" $path "field" "tolerance")) "false" -}}true{{- end -}}
{{- end -}}

{{/* A number as Prometheus writes a bucket boundary (client_python's floatToGoString): 1 → 1.0. */}}
{{- define "tidescale.goFloat" -}}
{{- $f := float64 . -}}
{{- if eq $f (floor $f) }}{{ printf "%.1f" $f }}{{ else }}{{ $f }}{{ end -}}
{{- end -}}

{{/* The body of a PromQL double-quoted string (backslash, quote and control characters escaped). */}}
{{- define "tidescale.promqlString" -}}
{{- . | replace "\\" "\\\\" | replace "\"" "\\\"" | replace "\n" "\\n" | replace "\r" "\\r" | replace "\t" "\\t" -}}
{{- end -}}

{{/* Least privilege for a component that posts Events: Events in one namespace, nothing else.
     Takes root, ctx (component labels), name, namespace, account, and verbs (default: create only;
     the recommender also reads and patches the one Event its replicas share per change). */}}
{{- define "tidescale.eventsRole" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-events
  namespace: {{ .namespace }}
  labels:
    {{- include "tidescale.componentLabels" .ctx | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [events]
    verbs: {{ toJson (.verbs | default (list "create")) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-events
  namespace: {{ .namespace }}
  labels:
    {{- include "tidescale.componentLabels" .ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-events
subjects:
  - kind: ServiceAccount
    name: {{ .account }}
    namespace: {{ include "tidescale.namespace" .root }}
{{- end -}}

{{/* A Role on the target Deployments' objects of one kind, by name only (resourceNames), and its
     binding to the recommender: .suffix, .apiGroup, .resource, .names, .verbs. Direct scaling reads
     and patches deployments/scale; a panic that may wait for a confirmation reads the targets' HPAs
     (tidescale.recommenderReadsHpas). */}}
{{- define "tidescale.targetsRole" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-{{ .suffix }}
  namespace: {{ .namespace }}
  labels:
    {{- include "tidescale.componentLabels" .ctx | nindent 4 }}
rules:
  - apiGroups: [{{ .apiGroup }}]
    resources: [{{ .resource }}]
    resourceNames: {{ toJson (.names | uniq) }}
    verbs: {{ toJson .verbs }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-{{ .suffix }}
  namespace: {{ .namespace }}
  labels:
    {{- include "tidescale.componentLabels" .ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-{{ .suffix }}
subjects:
  - kind: ServiceAccount
    name: {{ .account }}
    namespace: {{ include "tidescale.namespace" .root }}
{{- end -}}

{{/* Whether the recommender reads its targets' HPAs for their lastScaleTime: a panic may wait for a
     confirmation through one (panic_confirm_readings above 1 in recommender.settings.tuning, else
     recommender.tuning; autoscaler/hpaclock.py). */}}
{{- define "tidescale.recommenderReadsHpas" -}}
{{- $tuning := merge (dict) (.Values.recommender.settings.tuning | default dict) (.Values.recommender.tuning | default dict) -}}
{{- if and (ne .Values.autoscaling.mode "direct") (gt (int (index $tuning "panic_confirm_readings" | default 1)) 1) -}}true{{- end -}}
{{- end -}}

{{/* Whether the recommender has an account of its own: it posts Events, writes the scale or reads HPAs. */}}
{{- define "tidescale.recommenderHasAccount" -}}
{{- if or .Values.recommender.kubeEvents (eq .Values.autoscaling.mode "direct") (include "tidescale.recommenderReadsHpas" .) -}}true{{- end -}}
{{- end -}}

{{/* The recommender's account when it posts Events: <account>-recommender when created. */}}
{{- define "tidescale.recommenderServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "tidescale.joinName" (dict "base" (include "tidescale.serviceAccount" .) "suffix" "recommender") -}}
{{- else -}}
{{- include "tidescale.serviceAccount" . -}}
{{- end -}}
{{- end -}}

{{/* Generated PromQL or dashboard JSON with the placeholders of files/placeholders.yaml
     (tidescale.contracts.placeholders) replaced whole by the values they stand for. */}}
{{- define "tidescale.fill" -}}
{{- $tokens := .root.Files.Get "files/placeholders.yaml" | fromYaml -}}
{{- .text | replace $tokens.clusterLabel .root.Values.clusterLabel -}}
{{- end -}}
