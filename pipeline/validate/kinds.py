"""Which built-in kinds are namespaced and which are cluster-scoped (``kubectl api-resources``, v1.30).

The trace does not record scope; a replay maps namespaces, so a cluster-scoped object cannot be placed
in the simulated cluster's replay namespaces, and an unknown kind needs its CRD installed there.
"""

from __future__ import annotations

NAMESPACED: frozenset[tuple[str, str]] = frozenset(
    [
        ("", kind)
        for kind in (
            "Pod",
            "ConfigMap",
            "Secret",
            "ServiceAccount",
            "PersistentVolumeClaim",
            "Service",
            "Endpoints",
            "Event",
            "LimitRange",
            "ResourceQuota",
            "PodTemplate",
            "ReplicationController",
        )
    ]
    + [("apps", k) for k in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision")]
    + [("batch", "Job"), ("batch", "CronJob"), ("autoscaling", "HorizontalPodAutoscaler")]
    + [("policy", "PodDisruptionBudget"), ("networking.k8s.io", "Ingress")]
    + [("networking.k8s.io", "NetworkPolicy"), ("rbac.authorization.k8s.io", "Role")]
    + [("rbac.authorization.k8s.io", "RoleBinding"), ("coordination.k8s.io", "Lease")]
    + [("discovery.k8s.io", "EndpointSlice"), ("events.k8s.io", "Event")]
    + [("storage.k8s.io", "CSIStorageCapacity")]
)
"""(group, kind) of built-in namespaced kinds."""

CLUSTER_SCOPED: frozenset[tuple[str, str]] = frozenset(
    [("", k) for k in ("Namespace", "Node", "PersistentVolume", "ComponentStatus")]
    + [("rbac.authorization.k8s.io", k) for k in ("ClusterRole", "ClusterRoleBinding")]
    + [("storage.k8s.io", k) for k in ("StorageClass", "CSIDriver", "CSINode", "VolumeAttachment")]
    + [("apiextensions.k8s.io", "CustomResourceDefinition"), ("apiregistration.k8s.io", "APIService")]
    + [("scheduling.k8s.io", "PriorityClass"), ("node.k8s.io", "RuntimeClass")]
    + [("networking.k8s.io", "IngressClass"), ("certificates.k8s.io", "CertificateSigningRequest")]
    + [("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")]
    + [("admissionregistration.k8s.io", "MutatingWebhookConfiguration")]
    + [("flowcontrol.apiserver.k8s.io", "FlowSchema")]
    + [("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration")]
)
"""(group, kind) of built-in cluster-scoped kinds."""
