{{/* Chart name, truncated for label values. */}}
{{- define "rebalanser-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "rebalanser-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rebalanser-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rebalanser-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rebalanser-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rebalanser-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rebalanser
{{- end -}}

{{/* The operator's ServiceAccount. With serviceAccount.create=false a name is required: falling back to
     the namespace's "default" ServiceAccount would grant the operator's rights to every pod that runs
     without a ServiceAccount of its own. */}}
{{- define "rebalanser-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rebalanser-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else -}}
{{- fail "serviceAccount.name: with serviceAccount.create=false, name the ServiceAccount the operator runs as (a dedicated one; the namespace's default ServiceAccount is never used)" -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects (ClusterRoles, ClusterRoleBindings) carry the release's namespace in their
     name: two releases of the same name in different namespaces must not share them. */}}
{{- define "rebalanser-operator.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "rebalanser-operator.fullname" .) -}}
{{- end -}}

{{/* Namespaces served when not cluster-wide (a JSON list). */}}
{{- define "rebalanser-operator.watchNamespaces" -}}
{{- if .Values.rbac.watchNamespaces -}}
{{- toJson .Values.rbac.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* RBAC rules on ResourceGroups themselves. In the namespaced mode these are granted cluster-wide
     (a ClusterRoleBinding): deleting a namespace deletes its RoleBindings in no particular order, and
     the operator must still be able to release the finalizer of a ResourceGroup deleted with it. */}}
{{- define "rebalanser-operator.groupRules" -}}
- apiGroups: ["rebalanser.io"]
  resources: ["resourcegroups"]
  # kopf lists/watches them and patches annotations (progress) and the finalizer.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["rebalanser.io"]
  resources: ["resourcegroups/status"]
  verbs: ["get", "patch"]
{{- end -}}

{{/* RBAC rules on what the operator reads and writes beside ResourceGroups, per served namespace.
     docs/operator.md ("Security model", "RBAC") lists the same rules; tests/pods/test_rbac_pods.py
     checks the table against `kubectl auth can-i --list`. */}}
{{- define "rebalanser-operator.namespaceRules" -}}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["configmaps"]
  # <name>-rebalanser: what the workers of a ResourceGroup need (connect string, group path), for envFrom.
  # Only ConfigMaps labelled app.kubernetes.io/managed-by=rebalanser-operator are ever replaced (the
  # operator reads the existing one by name first and refuses a foreign one; the chart's
  # ValidatingAdmissionPolicy enforces the same on the API server).
  verbs: ["get", "create", "update"]
- apiGroups: [""]
  resources: ["secrets"]
  # spec.zookeeper.credentialsSecret and spec.zookeeper.tls.secret, read by name only: no list, no
  # watch (a rotation is noticed by re-reading them every operator.secretPollSeconds); never written.
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  # spec.workload: rollout-aware tuning watches the workloads ResourceGroups name (and reads one by name
  # until the watch has reported on it).
  verbs: ["get", "list", "watch"]
{{- if .Values.failover.enabled }}
- apiGroups: [""]
  resources: ["pods"]
  # spec.failover: KubeletConfirmed: the kubelet's reports of terminated worker containers.
  verbs: ["get", "list", "watch"]
{{- end }}
{{- if .Values.operator.peering }}
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{- define "rebalanser-operator.rules" -}}
{{ include "rebalanser-operator.groupRules" . }}
{{ include "rebalanser-operator.namespaceRules" . }}
{{- end -}}

{{/* The image reference: repository@digest when image.digest is set, else repository:tag. */}}
{{- define "rebalanser-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
