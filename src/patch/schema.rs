//! What the `patch` module knows of Kubernetes types: the built-in API groups, and the
//! strategic-merge metadata (`patchStrategy` / `patchMergeKey` struct tags) of the list
//! fields that matter to stages.
//!
//! The metadata is keyed by *type and field*, exactly like the Go struct tags it copies,
//! so `conditions` of `PodStatus` merges by `type` while `containerStatuses` next to it is
//! replaced, and `ports` means `containerPort` in a `Container` but `port` in a
//! `ServiceSpec`. A field that is not in the table is a map that merges, or a list that
//! is replaced, which is also what Kubernetes does for a field without tags.
//!
//! Sources: `k8s.io/api/core/v1/types.go` (`PodSpec`, `Container`, `EphemeralContainer`,
//! `PodStatus`, `NodeSpec`, `NodeStatus`, `ServiceSpec`, `ServiceStatus`,
//! `NamespaceStatus`, `PersistentVolumeClaimStatus`, `ReplicationControllerStatus`),
//! `k8s.io/api/{apps,batch}/v1/types.go` (workload statuses) and
//! `k8s.io/apimachinery/pkg/apis/meta/v1/types.go` (`ObjectMeta`).

/// A Kubernetes API type whose fields have strategic-merge metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// A type this table knows nothing about: maps merge, lists are replaced.
    Unknown,
    /// The top level of an object of some kind.
    Root(Root),
    /// `metav1.ObjectMeta`.
    ObjectMeta,
    /// `PodTemplateSpec` (`metadata` + `spec`).
    PodTemplateSpec,
    /// `PodSpec`.
    PodSpec,
    /// `Container` and `EphemeralContainer` (same tags).
    Container,
    /// `PodStatus`.
    PodStatus,
    /// `NodeSpec`.
    NodeSpec,
    /// `NodeStatus`.
    NodeStatus,
    /// `ServiceSpec`.
    ServiceSpec,
    /// A status whose only tagged list is `conditions`, merged by `type`.
    ConditionsStatus,
    /// The spec of a workload that holds a pod `template`.
    WorkloadSpec,
    /// `CronJobSpec`.
    CronJobSpec,
    /// `JobTemplateSpec` (`metadata` + a Job `spec`).
    JobTemplateSpec,
}

/// The top level of an object, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Root {
    /// `Pod`.
    Pod,
    /// `Node`.
    Node,
    /// `Service`.
    Service,
    /// `Deployment`, `ReplicaSet`, `StatefulSet`, `DaemonSet`, `Job`,
    /// `ReplicationController`: `spec.template` is a pod template, `status.conditions`
    /// merges by `type`.
    Workload,
    /// `CronJob`.
    CronJob,
    /// `PodTemplate`.
    PodTemplate,
    /// `Namespace`, `PersistentVolumeClaim`: `status.conditions` merges by `type`.
    Conditioned,
    /// Any other kind: only `metadata` is known.
    Other,
}

/// How a list field is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// The patch's list replaces the object's (no `patchStrategy`, or `listType=atomic`).
    Replace,
    /// `patchStrategy:"merge"`: items with the same merge key are merged; a list of
    /// primitives (no merge key) is a set.
    Merge {
        /// `patchMergeKey`, `None` for a set of primitives.
        key: Option<&'static str>,
    },
}

/// The strategic-merge metadata of one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldMeta {
    /// How the field is patched when it is a list.
    pub(crate) list: ListStrategy,
    /// The type of the field's value (a map) or of its items (a list of maps).
    pub(crate) child: Ty,
}

impl FieldMeta {
    /// A field this table knows nothing about.
    pub(crate) const UNKNOWN: Self = Self::map(Ty::Unknown);

    /// A map (struct) field of type `child`.
    const fn map(child: Ty) -> Self {
        Self {
            list: ListStrategy::Replace,
            child,
        }
    }

    /// A list replaced as a whole (declared atomic, or without patch strategy).
    const fn replace() -> Self {
        Self::map(Ty::Unknown)
    }

    /// A list of maps merged by `key`, whose items are of type `child`.
    const fn merge_by(key: &'static str, child: Ty) -> Self {
        Self {
            list: ListStrategy::Merge { key: Some(key) },
            child,
        }
    }

    /// A list of primitives merged as a set.
    const fn set() -> Self {
        Self {
            list: ListStrategy::Merge { key: None },
            child: Ty::Unknown,
        }
    }

    /// The merge key, if the field is a list merged by key.
    pub(crate) fn merge_key(self) -> Option<&'static str> {
        match self.list {
            ListStrategy::Merge { key } => key,
            ListStrategy::Replace => None,
        }
    }
}

/// The type of the top level of an object of `kind`.
pub(crate) fn root(kind: &str) -> Ty {
    Ty::Root(match kind {
        "Pod" => Root::Pod,
        "Node" => Root::Node,
        "Service" => Root::Service,
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => Root::Workload,
        "CronJob" => Root::CronJob,
        "PodTemplate" => Root::PodTemplate,
        "Namespace" | "PersistentVolumeClaim" => Root::Conditioned,
        _ => Root::Other,
    })
}

/// The strategic-merge metadata of `field` in a value of type `ty`.
pub(crate) fn field(ty: Ty, field: &str) -> FieldMeta {
    use FieldMeta as F;
    match (ty, field) {
        (Ty::Root(_), "metadata") => F::map(Ty::ObjectMeta),
        (Ty::Root(root), "spec") => F::map(match root {
            Root::Pod => Ty::PodSpec,
            Root::Node => Ty::NodeSpec,
            Root::Service => Ty::ServiceSpec,
            Root::Workload => Ty::WorkloadSpec,
            Root::CronJob => Ty::CronJobSpec,
            Root::PodTemplate | Root::Conditioned | Root::Other => Ty::Unknown,
        }),
        (Ty::Root(root), "status") => F::map(match root {
            Root::Pod => Ty::PodStatus,
            Root::Node => Ty::NodeStatus,
            Root::Service | Root::Workload | Root::Conditioned => Ty::ConditionsStatus,
            Root::CronJob | Root::PodTemplate | Root::Other => Ty::Unknown,
        }),
        (Ty::Root(Root::PodTemplate), "template") => F::map(Ty::PodTemplateSpec),

        // ObjectMeta: `patchStrategy:"merge" patchMergeKey:"uid"`, `patchStrategy:"merge"`.
        (Ty::ObjectMeta, "ownerReferences") => F::merge_by("uid", Ty::Unknown),
        (Ty::ObjectMeta, "finalizers") => F::set(),

        (Ty::PodTemplateSpec | Ty::JobTemplateSpec, "metadata") => F::map(Ty::ObjectMeta),
        (Ty::PodTemplateSpec, "spec") => F::map(Ty::PodSpec),
        (Ty::WorkloadSpec, "template") => F::map(Ty::PodTemplateSpec),
        (Ty::CronJobSpec, "jobTemplate") => F::map(Ty::JobTemplateSpec),
        (Ty::JobTemplateSpec, "spec") => F::map(Ty::WorkloadSpec),

        // PodSpec.
        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            F::merge_by("name", Ty::Container)
        }
        // `patchStrategy:"merge,retainKeys"`; `$retainKeys` works wherever it is sent.
        (Ty::PodSpec, "volumes" | "resourceClaims") => F::merge_by("name", Ty::Unknown),
        (Ty::PodSpec, "imagePullSecrets" | "schedulingGates") => F::merge_by("name", Ty::Unknown),
        (Ty::PodSpec, "hostAliases") => F::merge_by("ip", Ty::Unknown),
        (Ty::PodSpec, "topologySpreadConstraints") => F::merge_by("topologyKey", Ty::Unknown),
        // `+listType=atomic`, no patch strategy.
        (Ty::PodSpec, "tolerations" | "readinessGates") => F::replace(),

        // Container (and EphemeralContainerCommon).
        (Ty::Container, "ports") => F::merge_by("containerPort", Ty::Unknown),
        (Ty::Container, "env") => F::merge_by("name", Ty::Unknown),
        (Ty::Container, "volumeMounts") => F::merge_by("mountPath", Ty::Unknown),
        (Ty::Container, "volumeDevices") => F::merge_by("devicePath", Ty::Unknown),
        (Ty::Container, "envFrom" | "command" | "args" | "resizePolicy") => F::replace(),

        // PodStatus.
        (Ty::PodStatus | Ty::NodeStatus | Ty::ConditionsStatus, "conditions") => {
            F::merge_by("type", Ty::Unknown)
        }
        (Ty::PodStatus, "podIPs" | "hostIPs") => F::merge_by("ip", Ty::Unknown),
        (Ty::PodStatus, "resourceClaimStatuses") => F::merge_by("name", Ty::Unknown),
        // `+listType=atomic` without `patchStrategy`: a status patch replaces them whole.
        (
            Ty::PodStatus,
            "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses",
        ) => F::replace(),

        // NodeSpec / NodeStatus.
        (Ty::NodeSpec, "podCIDRs") => F::set(),
        (Ty::NodeSpec, "taints") => F::replace(),
        // Declared mergeable by `type` although the key is not unique (see the Go comment).
        (Ty::NodeStatus, "addresses") => F::merge_by("type", Ty::Unknown),
        (Ty::NodeStatus, "images" | "volumesInUse" | "volumesAttached") => F::replace(),

        // ServiceSpec.
        (Ty::ServiceSpec, "ports") => F::merge_by("port", Ty::Unknown),

        _ => F::UNKNOWN,
    }
}

/// The API groups served by a stock kube-apiserver (with its aggregated apiextensions
/// and kube-aggregator servers): every kind in them is built in and accepts strategic
/// merge patches. Source: the group packages of `k8s.io/api`, plus `apiextensions.k8s.io`
/// and `apiregistration.k8s.io`; `extensions` is the legacy group of older clusters.
pub(crate) const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// The group of a KWOK `apiGroup` string: `v1` → `""` (core), `apps/v1` → `apps`; a bare
/// group without version (`apps`) is taken as is.
pub(crate) fn group_of(api_group: &str) -> &str {
    match api_group.split_once('/') {
        Some((group, _version)) => group,
        None if is_version(api_group) => "",
        None => api_group,
    }
}

/// `v1`, `v2beta1`, `v1alpha3`, ...
fn is_version(s: &str) -> bool {
    s.strip_prefix('v')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_field_name_differs_by_type() {
        let pod = root("Pod");
        let spec = field(pod, "spec").child;
        let status = field(pod, "status").child;
        let container = field(spec, "containers").child;
        assert_eq!(field(container, "ports").merge_key(), Some("containerPort"));
        let service_spec = field(root("Service"), "spec").child;
        assert_eq!(field(service_spec, "ports").merge_key(), Some("port"));
        assert_eq!(field(status, "conditions").merge_key(), Some("type"));
        assert_eq!(
            field(status, "containerStatuses").list,
            ListStrategy::Replace
        );
        // `conditions` of an unknown type is not merged.
        assert_eq!(field(spec, "conditions").list, ListStrategy::Replace);
    }

    #[test]
    fn pod_template_nests_in_workloads_and_cronjobs() {
        let deployment_spec = field(root("Deployment"), "spec").child;
        let template = field(deployment_spec, "template").child;
        let pod_spec = field(template, "spec").child;
        assert_eq!(field(pod_spec, "containers").merge_key(), Some("name"));

        let cron_spec = field(root("CronJob"), "spec").child;
        let job_template = field(cron_spec, "jobTemplate").child;
        let job_spec = field(job_template, "spec").child;
        let template = field(job_spec, "template").child;
        assert_eq!(field(template, "spec").child, Ty::PodSpec);
    }

    #[test]
    fn metadata_is_known_for_every_kind() {
        let meta = field(root("MyCustomThing"), "metadata").child;
        assert_eq!(
            field(meta, "finalizers").list,
            ListStrategy::Merge { key: None }
        );
        assert_eq!(field(meta, "ownerReferences").merge_key(), Some("uid"));
    }

    #[test]
    fn group_of_api_group() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of(""), "");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("coordination.k8s.io/v1"), "coordination.k8s.io");
        assert_eq!(group_of("apps"), "apps");
        assert_eq!(group_of("v2beta1"), "");
        assert_eq!(group_of("velero.io"), "velero.io");
    }
}
