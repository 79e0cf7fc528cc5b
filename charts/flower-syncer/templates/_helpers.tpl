{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "flower-syncer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name, with the chart name unless the release name already contains it. */}}
{{- define "flower-syncer.fullname" -}}
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

{{/* Name of cluster-scoped objects: unique per release and namespace. */}}
{{- define "flower-syncer.clusterName" -}}
{{- printf "%s-%s" (include "flower-syncer.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" }}
{{- end }}

{{- define "flower-syncer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "flower-syncer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flower-syncer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "flower-syncer.labels" -}}
helm.sh/chart: {{ include "flower-syncer.chart" . }}
{{ include "flower-syncer.selectorLabels" . }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flower-syncer
{{- end }}

{{- define "flower-syncer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "flower-syncer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository[:tag][@digest]; the tag defaults to the appVersion unless a digest is given. */}}
{{- define "flower-syncer.image" -}}
{{- $img := .Values.image }}
{{- if $img.digest }}
{{- if $img.tag }}{{ printf "%s:%s@%s" $img.repository $img.tag $img.digest }}{{ else }}{{ printf "%s@%s" $img.repository $img.digest }}{{ end }}
{{- else }}
{{- printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "flower-syncer.leaseName" -}}
{{- default (include "flower-syncer.fullname" .) .Values.agent.leaderElection.leaseName }}
{{- end }}

{{/* Git credentials: the Secret's name ("" = none) and the kind of auth (token or ssh). */}}
{{- define "flower-syncer.gitSecretName" -}}
{{- if .Values.git.existingSecret }}
{{- .Values.git.existingSecret }}
{{- else if or .Values.git.token .Values.git.ssh.identity }}
{{- printf "%s-git" (include "flower-syncer.fullname" .) }}
{{- end }}
{{- end }}

{{- define "flower-syncer.gitAuth" -}}
{{- if .Values.git.auth }}
{{- .Values.git.auth }}
{{- else if and (not .Values.git.existingSecret) .Values.git.ssh.identity }}
{{- "ssh" }}
{{- else if and (not .Values.git.existingSecret) .Values.git.token }}
{{- "token" }}
{{- else if regexMatch "^((ssh|git\\+ssh|ssh\\+git)://|[A-Za-z0-9._-]+@[^/:]+:)" .Values.git.repo }}
{{- "ssh" }}
{{- else }}
{{- "token" }}
{{- end }}
{{- end }}

{{- define "flower-syncer.webhookSecretName" -}}
{{- if .Values.webhook.existingSecret }}
{{- .Values.webhook.existingSecret }}
{{- else if .Values.webhook.secret }}
{{- printf "%s-webhook" (include "flower-syncer.fullname" .) }}
{{- end }}
{{- end }}

{{- define "flower-syncer.apiSecretName" -}}
{{- if .Values.api.existingSecret }}
{{- .Values.api.existingSecret }}
{{- else if .Values.api.token }}
{{- printf "%s-api" (include "flower-syncer.fullname" .) }}
{{- end }}
{{- end }}

{{/* Checks that the schema cannot express (or not with a clear message). */}}
{{- define "flower-syncer.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.agent.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs agent.leaderElection.enabled=true (only the elected leader may write)" }}
{{- end }}
{{- if and .Values.api.protectReads (not (include "flower-syncer.apiSecretName" .)) }}
{{- fail "api.protectReads=true needs an API token: set api.token or api.existingSecret" }}
{{- end }}
{{- if and .Values.git.token .Values.git.ssh.identity (not .Values.git.existingSecret) }}
{{- fail "git.token and git.ssh.identity are both set: use one of them" }}
{{- end }}
{{- if and .Values.git.ssh.identity (not .Values.git.ssh.knownHosts) (not .Values.git.existingSecret) }}
{{- fail "git.ssh.identity needs git.ssh.knownHosts (the host key of the Git server is always checked)" }}
{{- end }}
{{- if and (eq .Values.git.auth "ssh") (not .Values.git.existingSecret) (not .Values.git.ssh.identity) }}
{{- fail "git.auth=ssh needs git.existingSecret (keys identity and known_hosts) or git.ssh.identity and git.ssh.knownHosts" }}
{{- end }}
{{- if and .Values.git.token (eq .Values.git.auth "ssh") (not .Values.git.existingSecret) }}
{{- fail "git.token is an HTTPS token, but git.auth=ssh" }}
{{- end }}
{{- if and .Values.git.ssh.identity (eq .Values.git.auth "token") (not .Values.git.existingSecret) }}
{{- fail "git.ssh.identity is an SSH key, but git.auth=token" }}
{{- end }}
{{- end }}

{{/*
The tenant ServiceAccount the chart creates (tenant.create), as namespace/name.
*/}}
{{- define "flower-syncer.tenantServiceAccount" -}}
{{- if .Values.tenant.create -}}
{{ default .Release.Namespace .Values.tenant.namespace }}/{{ default (printf "%s-tenant" (include "flower-syncer.fullname" .)) .Values.tenant.name }}
{{- end -}}
{{- end }}

{{/*
The ServiceAccounts (namespace/name) the agent may impersonate: the tenant's and every one the
policy names.
*/}}
{{- define "flower-syncer.impersonated" -}}
{{- $out := list -}}
{{- with include "flower-syncer.tenantServiceAccount" . }}{{ $out = append $out . }}{{ end -}}
{{- with .Values.policy.default.serviceAccount }}{{ $out = append $out . }}{{ end -}}
{{- range .Values.policy.repositories }}{{ with .serviceAccount }}{{ $out = append $out . }}{{ end }}{{ end -}}
{{- toJson ($out | uniq) -}}
{{- end }}

{{/*
The policy file: the values' policy, the default entry naming the tenant ServiceAccount when the
chart creates one and the values name none.
*/}}
{{- define "flower-syncer.policy" -}}
{{- $default := deepCopy .Values.policy.default -}}
{{- if and (not $default.serviceAccount) .Values.tenant.create -}}
{{- $_ := set $default "serviceAccount" (include "flower-syncer.tenantServiceAccount" .) -}}
{{- end -}}
{{- if not $default.serviceAccount }}{{ $_ := unset $default "serviceAccount" }}{{ end -}}
{{- if kindIs "invalid" $default.names }}{{ $_ := unset $default "names" }}{{ end -}}
{{- toYaml (dict "apiVersion" "flower-syncer.io/v1" "kind" "Policy" "default" $default "repositories" .Values.policy.repositories) }}
{{- end }}
