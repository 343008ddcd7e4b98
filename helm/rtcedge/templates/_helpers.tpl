{{/* Names, labels and the few values derived from others. */}}

{{- define "rtcedge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-wide prefix of every object's name (at most 40 characters, so that
"<fullname>-transceiver-headless" and pod names stay within DNS label limits). */}}
{{- define "rtcedge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains (include "rtcedge.name" .) .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "rtcedge.name" .) | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "rtcedge.relay.fullname" -}}
{{- printf "%s-relay" (include "rtcedge.fullname" .) }}
{{- end }}

{{- define "rtcedge.transceiver.fullname" -}}
{{- printf "%s-transceiver" (include "rtcedge.fullname" .) }}
{{- end }}

{{/* The headless Service that gives every transceiver pod a stable DNS name. */}}
{{- define "rtcedge.transceiver.headless" -}}
{{- printf "%s-transceiver-headless" (include "rtcedge.fullname" .) }}
{{- end }}

{{- define "rtcedge.redis.fullname" -}}
{{- printf "%s-redis" (include "rtcedge.fullname" .) }}
{{- end }}

{{- define "rtcedge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "rtcedge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rtcedge
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "relay"). */}}
{{- define "rtcedge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rtcedge.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "rtcedge.componentLabels" -}}
{{ include "rtcedge.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "rtcedge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rtcedge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rtcedge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "rtcedge.keyringSecretName" -}}
{{- default (printf "%s-keyring" (include "rtcedge.fullname" .)) .Values.keyring.existingSecret }}
{{- end }}

{{/* HOST:PORT with IPv6 brackets when the pod network is IPv6. */}}
{{- define "rtcedge.anyAddress" -}}
{{- if eq .Values.ipFamily "IPv6" }}[::]{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/* HOST:PORT on the pod's own IP: $(POD_IP), set from the downward API's status.podIP and
expanded by the kubelet (a pod on the node's network has the node's IP there). Call with
(dict "ctx" $ "port" N). */}}
{{- define "rtcedge.podAddress" -}}
{{- if eq .ctx.Values.ipFamily "IPv6" -}}
[$(POD_IP)]:{{ int64 .port }}
{{- else -}}
$(POD_IP):{{ int64 .port }}
{{- end }}
{{- end }}

{{/* The relay's --internal: its pod IP and port base. */}}
{{- define "rtcedge.relay.internal" -}}
{{- include "rtcedge.podAddress" (dict "ctx" . "port" .Values.relay.internalPortBase) }}
{{- end }}

{{/* The downward-API variable rtcedge.podAddress needs; list it before any env that uses it. */}}
{{- define "rtcedge.podIpEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* --transceiver-ids: the configured range, or every ordinal the StatefulSet may have: its
replicas, or with autoscaling every ordinal up to maxReplicas (the relays must route to any pod
the autoscaler may start, before it starts). */}}
{{- define "rtcedge.relay.transceiverIds" -}}
{{- include "rtcedge.transceiver.autoscaling.check" . }}
{{- if .Values.relay.transceiverIds }}
{{- .Values.relay.transceiverIds }}
{{- else }}
{{- printf "0-%d" (sub (int (include "rtcedge.transceiver.maxReplicas" .)) 1) }}
{{- end }}
{{- end }}

{{/* The most transceiver pods there may be: replicas, or autoscaling.maxReplicas. */}}
{{- define "rtcedge.transceiver.maxReplicas" -}}
{{- $t := .Values.transceiver }}
{{- if $t.autoscaling.enabled }}{{ int $t.autoscaling.maxReplicas }}{{ else }}{{ int $t.replicas }}{{ end }}
{{- end }}

{{/* "true" when the id list (relay.transceiverIds' syntax: 0-15 or 0,2,4-6) holds every id
0..count-1. Call with (dict "ids" "0-9" "count" 10). */}}
{{- define "rtcedge.idsCover" -}}
{{- $ranges := list }}
{{- range splitList "," .ids }}
{{- $bounds := splitList "-" (trim .) }}
{{- $ranges = append $ranges (list (int (first $bounds)) (int (last $bounds))) }}
{{- end }}
{{- $missing := false }}
{{- range $id := until (int .count) }}
{{- $in := false }}
{{- range $ranges }}
{{- if and (ge $id (index . 0)) (le $id (index . 1)) }}{{ $in = true }}{{ end }}
{{- end }}
{{- if not $in }}{{ $missing = true }}{{ end }}
{{- end }}
{{- if not $missing }}true{{ end }}
{{- end }}

{{/* transceiver.autoscaling: the rules the schema cannot say, each failure naming its value. */}}
{{- define "rtcedge.transceiver.autoscaling.check" -}}
{{- $a := .Values.transceiver.autoscaling }}
{{- if $a.enabled }}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) }}
{{- fail (printf "transceiver.autoscaling.minReplicas (%d) must not exceed transceiver.autoscaling.maxReplicas (%d)" (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- end }}
{{- if and .Values.relay.transceiverIds (not (include "rtcedge.idsCover" (dict "ids" .Values.relay.transceiverIds "count" $a.maxReplicas))) }}
{{- fail (printf "relay.transceiverIds (%s) must cover every id 0-%d: the autoscaler may start any transceiver up to transceiver.autoscaling.maxReplicas (%d), and the relays route only to the ids they know; leave relay.transceiverIds empty to derive it" .Values.relay.transceiverIds (sub (int $a.maxReplicas) 1) (int $a.maxReplicas)) }}
{{- end }}
{{- else if ne $a.customMetrics.provider "none" }}
{{- fail (printf "transceiver.autoscaling.customMetrics.provider=%s needs transceiver.autoscaling.enabled=true" $a.customMetrics.provider) }}
{{- end }}
{{- end }}

{{/* The stable name of each transceiver pod under the headless Service, {id} being its ordinal. */}}
{{- define "rtcedge.transceiver.podDns" -}}
{{- printf "%s-{id}.%s.%s.svc.%s" (include "rtcedge.transceiver.fullname" .) (include "rtcedge.transceiver.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* --transceiver-dns: each transceiver pod's media socket. */}}
{{- define "rtcedge.relay.transceiverDns" -}}
{{- printf "%s:%d" (include "rtcedge.transceiver.podDns" .) (int .Values.transceiver.mediaPort) }}
{{- end }}

{{/* --peer-http-dns: each transceiver pod's WHIP listener, where the others pass on a DELETE or
PATCH for a session it owns. */}}
{{- define "rtcedge.transceiver.peerHttpDns" -}}
{{- printf "%s:%d" (include "rtcedge.transceiver.podDns" .) (int .Values.transceiver.httpPort) }}
{{- end }}

{{- define "rtcedge.relay.maxHintAge" -}}
{{- if kindIs "invalid" .Values.relay.maxHintAgeSeconds }}
{{- add (int .Values.transceiver.maxDurationSeconds) 60 }}
{{- else }}
{{- int .Values.relay.maxHintAgeSeconds }}
{{- end }}
{{- end }}

{{/* Capabilities the relay needs: a port below 1024 bound on the node itself, and NET_ADMIN only
when asked for (SO_RCVBUFFORCE). Empty for the defaults. */}}
{{- define "rtcedge.relay.capabilities" -}}
{{- $caps := list }}
{{- $tcp := .Values.relay.tcp }}
{{- if and (eq .Values.relay.mode "hostNetwork") (or (lt (int .Values.relay.port) 1024) (and $tcp.enabled (lt (int $tcp.port) 1024))) }}
{{- $caps = append $caps "NET_BIND_SERVICE" }}
{{- end }}
{{- if .Values.relay.netAdmin }}
{{- $caps = append $caps "NET_ADMIN" }}
{{- end }}
{{- join "," $caps }}
{{- end }}

{{/* The public IP:port of the relays' ICE-TCP listener (relay.tcp), for the answers. */}}
{{- define "rtcedge.relay.tcpPublicAddress" -}}
{{- $t := .Values.relay.tcp }}
{{- if $t.publicAddress }}
{{- $t.publicAddress }}
{{- else }}
{{- $host := regexReplaceAll ":[0-9]+$" (required "relay.publicAddress is required: the IP:port clients reach the relays at" .Values.relay.publicAddress) "" }}
{{- $port := $t.port }}
{{- if eq .Values.relay.mode "loadBalancer" }}
{{- $port = $t.servicePort }}
{{- else if eq .Values.relay.mode "hostPort" }}
{{- $port = default $t.port $t.hostPort }}
{{- end }}
{{- printf "%s:%d" $host (int64 $port) }}
{{- end }}
{{- end }}

{{/* The UDP port the relay is reached at from outside, for NOTES and checks. */}}
{{- define "rtcedge.relay.publicPort" -}}
{{- if eq .Values.relay.mode "loadBalancer" }}
{{- int64 .Values.relay.service.port }}
{{- else if eq .Values.relay.mode "hostPort" }}
{{- int64 (default .Values.relay.port .Values.relay.hostPort) }}
{{- else }}
{{- int64 .Values.relay.port }}
{{- end }}
{{- end }}

{{- define "rtcedge.transceiver.terminationGrace" -}}
{{- $needed := add (int .Values.transceiver.preStopSleepSeconds) (int .Values.transceiver.drainGraceSeconds) }}
{{- if kindIs "invalid" .Values.transceiver.terminationGracePeriodSeconds }}
{{- add $needed 15 }}
{{- else if le (int .Values.transceiver.terminationGracePeriodSeconds) $needed }}
{{- fail (printf "transceiver.terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + drainGraceSeconds (%d): live calls would be killed before they drain" (int .Values.transceiver.terminationGracePeriodSeconds) $needed) }}
{{- else }}
{{- int .Values.transceiver.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* The Secret holding the Redis password, or "" when the relays send none. */}}
{{- define "rtcedge.redis.passwordSecret" -}}
{{- if .Values.redis.auth.existingSecret }}
{{- .Values.redis.auth.existingSecret }}
{{- else if .Values.redis.enabled }}
{{- printf "%s-redis" (include "rtcedge.fullname" .) }}
{{- end }}
{{- end }}

{{- define "rtcedge.redis.caFile" -}}
/etc/rtcedge/redis-ca/{{ .Values.redis.tls.caKey }}
{{- end }}

{{/* Refuses Redis settings that cannot work or would show a secret; call once. */}}
{{- define "rtcedge.redis.check" -}}
{{- $rd := .Values.redis }}
{{- $sources := 0 }}
{{- if $rd.enabled }}{{ $sources = add1 $sources }}{{ end }}
{{- if $rd.url }}{{ $sources = add1 $sources }}{{ end }}
{{- if $rd.existingSecret }}{{ $sources = add1 $sources }}{{ end }}
{{- if gt $sources 1 }}
{{- fail "redis: set only one of redis.enabled, redis.url and redis.existingSecret" }}
{{- end }}
{{- if and $rd.url (regexMatch "^rediss?://[^/@]*:[^/@]*@" $rd.url) }}
{{- fail "redis.url must not carry a password (it would be in the manifest in plain text): put the password in a Secret named by redis.auth.existingSecret, or the whole URL in redis.existingSecret" }}
{{- end }}
{{- if and $rd.auth.existingSecret (eq $sources 0) }}
{{- fail "redis.auth.existingSecret is set but no Redis is: set redis.enabled, redis.url or redis.existingSecret" }}
{{- end }}
{{- if and $rd.tls.caSecret $rd.tls.caConfigMap }}
{{- fail "redis.tls: set caSecret or caConfigMap, not both" }}
{{- end }}
{{- if or $rd.tls.caSecret $rd.tls.caConfigMap }}
{{- if $rd.enabled }}
{{- fail "redis.tls: the in-chart Redis has no TLS (it is reached only by relays, inside the cluster); the CA is for an external rediss:// Redis" }}
{{- end }}
{{- if and $rd.url (not (hasPrefix "rediss://" $rd.url)) }}
{{- fail "redis.tls.caSecret/caConfigMap need a rediss:// (TLS) redis.url" }}
{{- end }}
{{- if eq $sources 0 }}
{{- fail "redis.tls is set but no Redis is: set redis.url or redis.existingSecret" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The relays' Redis settings as env entries: RTCEDGE_REDIS_URL, RTCEDGE_REDIS_PASSWORD (from a
Secret, never a value), RTCEDGE_REDIS_CA_FILE; nothing without Redis. */}}
{{- define "rtcedge.relay.redisEnv" -}}
{{- include "rtcedge.redis.check" . }}
{{- $rd := .Values.redis }}
{{- if $rd.enabled }}
- name: RTCEDGE_REDIS_URL
  value: {{ printf "redis://%s.%s.svc.%s:%d/0" (include "rtcedge.redis.fullname" .) .Release.Namespace .Values.clusterDomain (int $rd.port) | quote }}
{{- else if $rd.url }}
- name: RTCEDGE_REDIS_URL
  value: {{ $rd.url | quote }}
{{- else if $rd.existingSecret }}
- name: RTCEDGE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $rd.existingSecret }}
      key: {{ $rd.secretKey }}
{{- end }}
{{- with include "rtcedge.redis.passwordSecret" . }}
- name: RTCEDGE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $rd.auth.secretKey }}
{{- end }}
{{- if or $rd.tls.caSecret $rd.tls.caConfigMap }}
- name: RTCEDGE_REDIS_CA_FILE
  value: {{ include "rtcedge.redis.caFile" . | quote }}
{{- end }}
{{- end }}

{{/* The networks the transceivers accept encapsulated datagrams from (--relay-network), as JSON:
transceiver.relayNetworks, plus networkPolicy.relayNodeCIDRs in hostNetwork mode (relays then send
from their nodes' addresses). An encapsulated datagram names the client it speaks for, so an empty
list (any source) would let whoever reaches the media port move a session's return path: refused,
as is a /0. */}}
{{- define "rtcedge.transceiver.relayNetworks" -}}
{{- $nets := list }}
{{- if eq .Values.relay.mode "hostNetwork" }}
{{- $nets = concat $nets .Values.networkPolicy.relayNodeCIDRs }}
{{- end }}
{{- $nets = concat $nets .Values.transceiver.relayNetworks | uniq }}
{{- if not $nets }}
{{- if eq .Values.relay.mode "hostNetwork" }}
{{- fail "networkPolicy.relayNodeCIDRs (or transceiver.relayNetworks) is required in relay.mode=hostNetwork: list the CIDRs of the relay nodes. The transceivers accept encapsulated datagrams (which name the client they speak for) only from there (--relay-network); without it anyone who reaches their media port could redirect a call's media" }}
{{- else }}
{{- fail (printf "transceiver.relayNetworks is required in relay.mode=%s: list the pod CIDR(s) the relay pods get addresses from (e.g. 10.244.0.0/16; docs/deploy.md, section Network policy). The transceivers accept encapsulated datagrams (which name the client they speak for) only from there (--relay-network); without it anyone who reaches their media port could redirect a call's media" .Values.relay.mode) }}
{{- end }}
{{- end }}
{{- range $nets }}
{{- if hasSuffix "/0" . }}
{{- fail (printf "transceiver.relayNetworks / networkPolicy.relayNodeCIDRs: %s is every address; list the networks the relays send from" .) }}
{{- end }}
{{- end }}
{{- toJson $nets }}
{{- end }}

{{/* NetworkPolicy peers that are the relays: their pods, or their nodes in hostNetwork mode. */}}
{{- define "rtcedge.relay.peers" -}}
{{- if eq .Values.relay.mode "hostNetwork" }}
{{- range .Values.networkPolicy.relayNodeCIDRs }}
- ipBlock:
    cidr: {{ . }}
{{- end }}
{{- else }}
- podSelector:
    matchLabels:
      {{- include "rtcedge.selectorLabels" (dict "ctx" . "component" "relay") | nindent 6 }}
{{- end }}
{{- end }}

{{/* Container securityContext of both services: call with (dict "caps" list-of-capabilities). */}}
{{- define "rtcedge.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
  {{- with .caps }}
  add: {{ toJson . }}
  {{- end }}
{{- end }}

{{/* Refuse an Ingress path that would route /metrics (or /healthz, /readyz) to the HTTP port:
Prefix "/" does, as does an ImplementationSpecific prefix of "/metrics" (most controllers match
those as plain string prefixes). Call with one entry of transceiver.ingress.hosts[].paths. */}}
{{- define "rtcedge.transceiver.ingressPathCheck" -}}
{{- $path := .path }}
{{- $covers := false }}
{{- if eq .pathType "Prefix" }}
{{- $p := trimSuffix "/" $path }}
{{- $covers = or (eq $p "") (eq $p "/metrics") (eq $p "/healthz") (eq $p "/readyz") }}
{{- else if eq .pathType "Exact" }}
{{- $covers = has (trimSuffix "/" $path) (list "/metrics" "/healthz" "/readyz") }}
{{- else }}
{{- $covers = or (hasPrefix $path "/metrics") (hasPrefix $path "/healthz") (hasPrefix $path "/readyz") }}
{{- end }}
{{- if $covers }}
{{- fail (printf "transceiver.ingress: path %s (%s) would publish /metrics, /healthz or /readyz; route only the signaling and page paths: /whip (Prefix), / (Exact), /static (Prefix), /v1/realtime (Prefix), /realtime (Exact), the defaults" $path .pathType) }}
{{- end }}
{{- end }}

{{/* Global Relay (docs/global-relay.md): the rules the schema cannot say, checked once. */}}
{{- define "rtcedge.globalRelay.check" -}}
{{- $g := .Values.globalRelay }}
{{- if and (eq $g.role "edge") (not $g.routes) }}
{{- fail "globalRelay.routes is required with globalRelay.role=edge: an edge relay has no transceivers, it forwards every hint to its cluster's relays" }}
{{- end }}
{{- if and $g.peerIngress.enabled (not $g.peerIngress.networks) }}
{{- fail "globalRelay.peerIngress.networks is required with globalRelay.peerIngress.enabled: the networks edge relays send from (--peer-network); encapsulated datagrams name the client they speak for, so nobody else may send them" }}
{{- end }}
{{- range $g.peerIngress.networks }}
{{- if or (eq . "0.0.0.0/0") (eq . "::/0") }}
{{- fail (printf "globalRelay.peerIngress.networks: %s is every address; list the networks your edge relays send from" .) }}
{{- end }}
{{- end }}
{{- $seen := dict }}
{{- range $g.routes }}
{{- if eq (int .cluster) (int $.Values.clusterId) }}
{{- fail (printf "globalRelay.routes: cluster %d is this release's own clusterId; its hints go to its transceivers" (int .cluster)) }}
{{- end }}
{{- if hasKey $seen (toString .cluster) }}
{{- fail (printf "globalRelay.routes: cluster %d is listed twice" (int .cluster)) }}
{{- end }}
{{- $_ := set $seen (toString .cluster) true }}
{{- range .addresses }}
{{- if ne (hasPrefix "[" .) (eq $.Values.ipFamily "IPv6") }}
{{- fail (printf "globalRelay.routes: %s is not an %s address (ipFamily): relays send to their routes from the pod network" . $.Values.ipFamily) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Does this release run transceivers? Not as an edge (relays only). */}}
{{- define "rtcedge.hasTransceivers" -}}
{{- if ne .Values.globalRelay.role "edge" }}true{{ end }}
{{- end }}

{{/* The hosts of every route address, as /32 or /128 CIDRs in JSON (NetworkPolicy ipBlocks). */}}
{{- define "rtcedge.globalRelay.routeHosts" -}}
{{- $hosts := list }}
{{- range .Values.globalRelay.routes }}
{{- range .addresses }}
{{- if hasPrefix "[" . }}
{{- $hosts = append $hosts (printf "%s/128" (regexReplaceAll "^\\[(.*)\\]:[0-9]+$" . "${1}")) }}
{{- else }}
{{- $hosts = append $hosts (printf "%s/32" (regexReplaceAll ":[0-9]+$" . "")) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson ($hosts | uniq) }}
{{- end }}

{{/* Refuses backend credentials that cannot work: a key or a CA for the echo (which dials
nothing), a CA from two places, a CA for a backendUrl that is not wss://. */}}
{{- define "rtcedge.transceiver.backendCredentialsCheck" -}}
{{- $t := .Values.transceiver }}
{{- $ca := or $t.backendTls.caSecret $t.backendTls.caConfigMap }}
{{- if and (eq $t.backend "echo") $t.backendKeySecret.existingSecret }}
{{- fail "transceiver.backendKeySecret: the echo backend dials nothing and takes no key" }}
{{- end }}
{{- if and $t.backendTls.caSecret $t.backendTls.caConfigMap }}
{{- fail "transceiver.backendTls: set caSecret or caConfigMap, not both" }}
{{- end }}
{{- if and $ca (eq $t.backend "echo") }}
{{- fail "transceiver.backendTls: the echo backend dials nothing and takes no CA" }}
{{- end }}
{{- if and $ca $t.backendUrl (not (hasPrefix "wss://" $t.backendUrl)) }}
{{- fail "transceiver.backendTls: the CA is for a wss:// (TLS) transceiver.backendUrl" }}
{{- end }}
{{- end }}
