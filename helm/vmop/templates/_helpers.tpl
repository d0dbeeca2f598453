{{/* The release's base name: the release name, with "-vmop" unless it holds it already. */}}
{{- define "vmop.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vmop.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vmop.labels" -}}
{{ include "vmop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "vmop.managerServiceAccount" -}}{{ include "vmop.fullname" . }}-manager{{- end -}}

{{- define "vmop.managerImage" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "vmop.runnerImage" -}}
{{ .Values.runner.image.repository }}:{{ .Values.runner.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret holding the Redis URLs: the user's (external Redis) or the chart's. */}}
{{- define "vmop.redisSecret" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.existingSecret -}}
{{ .Values.redis.existingSecret }}
{{- else -}}
{{ include "vmop.fullname" . }}-redis
{{- end -}}
{{- end -}}

{{- define "vmop.redisHost" -}}
{{ include "vmop.fullname" . }}-redis.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* What the manager does with the Kubernetes API, and nothing more (Role or ClusterRole rules). */}}
{{- define "vmop.managerRules" -}}
- apiGroups: [vmoperator.jdrupes.org]
  resources: [vms]
  # create: a VirtualMachineClone's new VM (in the clone's namespace, made from its snapshot);
  # delete: the web GUI's Delete, for a person a SubjectAccessReview says may delete it.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [vms/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineoperations]
  # create: restartApprovalMode Automatic restarts through an operation; patch: to make the VM its
  # operation's owner; delete: finished operations are cleaned up.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineoperations/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineimages]
  # Imported once into a claim of their own (vmop makes it and its importer pod).
  verbs: [get, list, watch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineimages/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinesnapshots]
  # Copied into claims of their own (vmop makes them and the pods that copy; they go with it);
  # created and deleted by snapshot schedules.
  verbs: [get, list, watch, create, delete]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinesnapshots/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinerestores]
  # Written back by pods vmop makes (they go with it); a restore may stop and start its VM (vms patch).
  # create: the web GUI's, for a person RBAC lets (as its operations).
  verbs: [get, list, watch{{ if .Values.web.enabled }}, create{{ end }}]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinerestores/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineexports]
  # Served by a pod, a Service and a token Secret vmop makes (they go with it).
  verbs: [get, list, watch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineexports/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineclones]
  verbs: [get, list, watch{{ if .Values.web.enabled }}, create{{ end }}]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineclones/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinesnapshotschedules]
  verbs: [get, list, watch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachinesnapshotschedules/status]
  verbs: [patch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [vmpools]
  # VM-Operator's pools: their VMs are assigned to users (in the VMs' status) and released.
  verbs: [get, list, watch]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineipaddresses]
  # A VM's own address: made for a VM that names none (owned by it), leased, attached.
  verbs: [get, list, watch, create]
- apiGroups: [vmoperator.jdrupes.org]
  resources: [virtualmachineipaddresses/status]
  verbs: [patch]
{{- if .Values.web.enabled }}
# The web GUI's consoles: the SPICE display through a port-forward to the runner pod, the serial
# console through exec into it (the runner's serial-console relay), for people who may.
- apiGroups: [""]
  resources: [pods/portforward, pods/exec]
  verbs: [create, get]
# The New VM form offers the namespaces a SubjectAccessReview says the person may create VMs in.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list]
{{- end }}
- apiGroups: [apps]
  resources: [statefulsets]
  # Only to retire the runner StatefulSets of vmop 0.1 (their pods are kept and adopted).
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [get, list, watch, create, patch]
# LoadBalancer Services of VMs' SPICE ports (loadBalancerService)
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  # vmop makes each VM's runner pod (two during a live migration); patch: their metadata only
  # (config nudge, adoption); delete: stop, restart and move VMs.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/eviction]
  # Evict operations go through the eviction API, so PodDisruptionBudgets are respected.
  verbs: [create]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  # create: the runner data and disk claims of a VM (never deleted with it); patch and delete: a
  # live migration's copies of node-local disks take the place of the originals (or go, if it fails).
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  # All are read: one of the namespace that selects a VM's runner pods closes the guest's ports
  # to all but what it allows. Written: each VM's own and each disk export pod's (runnerNetworkPolicy).
  verbs: [get, list, watch{{ if .Values.runnerNetworkPolicy.enabled }}, create, patch, delete{{ end }}]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  # A VM that moves live on eviction has one, so a drain waits while vmop moves it.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  # get and patch: a repeated Event is counted in one series instead of being created again;
  # list: the web GUI's VM page shows the VM's Events.
  verbs: [create, get, list, patch]
{{- end -}}


{{/*
  The runners' shared Redis user of vmop before per-namespace users (redis.legacyRunnerUser):
  only for runners started before an upgrade to them, until they have moved.
*/}}
{{- define "vmop.legacyRunnerUser" -}}
{{- $ := index . 0 -}}
{{- if $.Values.redis.legacyRunnerUser }}
user vmop-runner on >{{ index . 1 }} {{ $.Files.Get "files/legacy-runner-acl-rules.txt" | trim }}
{{- end }}
{{- end -}}

{{/*
  The bundled Redis' credentials: generated once, then read back from the Secret on upgrades.
  runner-password is no user's (unless redis.legacyRunnerUser): the managers derive each
  namespace's runner and importer passwords from it (they make those users in Redis).
  Pods hash this (not the whole Secret) so only a credential change restarts them.
  Sentinel mode adds a user for replication and one for the Sentinels on every Redis, and a
  password on the Sentinels themselves; the URLs then name the Sentinels and the master's name.
*/}}
{{- define "vmop.redisSecretData" -}}
{{- $name := printf "%s-redis" (include "vmop.fullname" .) -}}
{{- $existing := (lookup "v1" "Secret" .Release.Namespace $name).data | default dict -}}
{{- $managerPassword := get $existing "manager-password" | b64dec | default (randAlphaNum 32) -}}
{{- $runnerPassword := get $existing "runner-password" | b64dec | default (randAlphaNum 32) -}}
manager-password: {{ $managerPassword | quote }}
runner-password: {{ $runnerPassword | quote }}
{{- if .Values.redis.sentinel.enabled }}
{{- $replicationPassword := get $existing "replication-password" | b64dec | default (randAlphaNum 32) -}}
{{- $sentinelUserPassword := get $existing "sentinel-user-password" | b64dec | default (randAlphaNum 32) -}}
{{- $sentinelPassword := get $existing "sentinel-password" | b64dec | default (randAlphaNum 32) -}}
{{- $sentinels := include "vmop.redisSentinelHosts" . -}}
{{- $master := .Values.redis.sentinel.masterName }}
replication-password: {{ $replicationPassword | quote }}
sentinel-user-password: {{ $sentinelUserPassword | quote }}
sentinel-password: {{ $sentinelPassword | quote }}
url: {{ printf "redis+sentinel://vmop-manager:%s@%s/%s?sentinelPassword=%s" $managerPassword $sentinels $master $sentinelPassword | quote }}
runner-url: {{ printf "redis+sentinel://vmop-runner:%s@%s/%s?sentinelPassword=%s" $runnerPassword $sentinels $master $sentinelPassword | quote }}
users.acl: |
  user default off
  user vmop-manager on >{{ $managerPassword }} ~* &* +@all
  {{- with include "vmop.legacyRunnerUser" (list . $runnerPassword) | trim }}{{ . | nindent 2 }}{{ end }}
  user vmop-replication on >{{ $replicationPassword }} {{ .Files.Get "files/replication-acl-rules.txt" | trim }}
  user vmop-sentinel on >{{ $sentinelUserPassword }} {{ .Files.Get "files/sentinel-acl-rules.txt" | trim }}
{{- else }}
{{- $host := printf "%s.%s:6379" (include "vmop.redisHost" .) .Values.clusterDomain }}
url: {{ printf "redis://vmop-manager:%s@%s" $managerPassword $host | quote }}
runner-url: {{ printf "redis://vmop-runner:%s@%s" $runnerPassword $host | quote }}
users.acl: |
  user default off
  user vmop-manager on >{{ $managerPassword }} ~* &* +@all
  {{- with include "vmop.legacyRunnerUser" (list . $runnerPassword) | trim }}{{ . | nindent 2 }}{{ end }}
{{- end }}
{{- end -}}

{{/* Sentinel mode: the StatefulSet's name, its headless Service, and every Sentinel's address. */}}
{{- define "vmop.redisSentinelSet" -}}{{ include "vmop.fullname" . }}-redis-node{{- end -}}
{{- define "vmop.redisHeadless" -}}
{{ include "vmop.fullname" . }}-redis-headless.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}
{{- define "vmop.redisSentinelHosts" -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.redis.sentinel.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s:26379" (include "vmop.redisSentinelSet" $) $i (include "vmop.redisHeadless" $)) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}
