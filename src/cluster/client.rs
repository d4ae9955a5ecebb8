//! [`Cluster`] over kube-rs: any API server, real or embedded.
//!
//! Resources are resolved through discovery (any built-in or custom kind) and handled as
//! [`RawObject`]s (their JSON, parsed once). Watches are kube-rs watchers (list, then watch; restarts and 410
//! Gone relist), turned into [`WatchEvent`]s: a relist arrives as one
//! [`WatchEvent::Restarted`], so the engine forgets objects that went away meanwhile.
//! Writes send the content type of the patch type, to the named subresource, as the user
//! to impersonate (one cached client per user). The client does not retry on its own:
//! failures reach the engine's classifier, which decides (kube-rs' default would retry
//! 429, 503 and 504 invisibly).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use kube::api::{Api, ApiResource, DeleteParams, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::mpsc;

use super::ResourceRef;
use super::managed::{ManagedNodes, ObjectSelectors, PodGate};
use super::raw::RawObject;
use super::rest_metrics::RestMetrics;
use super::throttle::Throttle;
use super::{Cluster, ClusterError, EventRequest, ObjectKey, PatchRequest, WatchEvent};
use crate::patch::PatchType;
use crate::retry::FailureKind;

/// The field manager of kstage's server-side applies.
pub const FIELD_MANAGER: &str = "kstage";

/// A resource found by discovery.
type Resolved = (ApiResource, ApiCapabilities);

/// A cluster reached through kube-rs.
#[derive(Clone)]
pub struct KubeCluster {
    client: kube::Client,
    config: kube::Config,
    resources: Arc<Mutex<HashMap<(String, String), Resolved>>>,
    impersonated: Arc<Mutex<HashMap<String, kube::Client>>>,
    managed: ManagedNodes,
    objects: Arc<ObjectSelectors>,
    throttle: Option<Arc<Throttle>>,
    held: Option<super::managed::HeldNodes>,
    rest: RestMetrics,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("server", &self.config.cluster_url.to_string())
            .finish_non_exhaustive()
    }
}

/// A kube-rs client for `config` whose requests are counted in `rest`.
///
/// # Errors
/// When the configuration does not make a client (its TLS or auth settings).
pub fn instrumented_client(
    config: kube::Config,
    rest: &RestMetrics,
) -> Result<kube::Client, ClusterError> {
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| from_kube(&e))?;
    Ok(builder.with_layer(&rest.layer()).build())
}

impl KubeCluster {
    /// The counts and latencies of this cluster's requests (every client it made).
    pub fn rest_metrics(&self) -> &RestMetrics {
        &self.rest
    }

    /// A cluster for a kube-rs client configuration (its own retries are turned off).
    pub fn new(mut config: kube::Config) -> Result<Self, ClusterError> {
        config.default_retry = false;
        let rest = RestMetrics::default();
        let client = instrumented_client(config.clone(), &rest)?;
        Ok(Self {
            client,
            config,
            rest,
            resources: Arc::default(),
            impersonated: Arc::default(),
            managed: ManagedNodes::All,
            objects: Arc::default(),
            throttle: None,
            held: None,
        })
    }

    /// Deliver only the nodes in `held` and their pods (node leases; see
    /// [`crate::lease`]).
    pub fn with_held_nodes(mut self, held: super::managed::HeldNodes) -> Self {
        self.held = Some(held);
        self
    }

    /// The managed nodes, kept current in `out` (for the lease loop).
    pub fn track_managed_nodes(
        &self,
        out: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    ) -> tokio::task::JoinHandle<()> {
        let cluster = self.clone();
        tokio::spawn(async move {
            let (tx, _rx) = mpsc::unbounded_channel();
            let Some(api) = cluster.watchable(&node_ref(), &tx).await else {
                return;
            };
            let events = events(api, node_config(&cluster.managed), &node_ref()).boxed();
            super::managed::track_nodes(events, cluster.managed.clone(), out).await;
        })
    }

    /// Limit requests (not watches) to `qps` per second with bursts of `burst`; a `qps`
    /// of 0 means no limit (the default).
    pub fn with_rate_limit(mut self, qps: f64, burst: u32) -> Self {
        self.throttle = Throttle::new(qps, burst).map(Arc::new);
        self
    }

    /// Narrow the objects of some kinds by label (applied by the server; default: all).
    pub fn with_object_selectors(mut self, objects: ObjectSelectors) -> Self {
        self.objects = Arc::new(objects);
        self
    }

    /// Manage only these nodes and the pods bound to them (default: all).
    pub fn with_managed_nodes(mut self, managed: ManagedNodes) -> Self {
        self.managed = managed;
        self
    }

    /// The client (not impersonating).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn client_as(&self, user: Option<&str>) -> Result<kube::Client, ClusterError> {
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            return Ok(self.client.clone());
        };
        let mut cache = self
            .impersonated
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cache.get(user) {
            return Ok(c.clone());
        }
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        let client = instrumented_client(config, &self.rest)?;
        cache.insert(user.to_owned(), client.clone());
        Ok(client)
    }

    /// The resource serving `api_version` and `kind`, by discovery (cached).
    async fn resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, ApiCapabilities), ClusterError> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(r) = self
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(r.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| from_kube(&e))?;
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, found.clone());
        Ok(found)
    }

    /// The API of a resource to watch, once discovery finds it (retried with backoff
    /// while the API server starts or a CRD is missing); `None` when nobody listens.
    async fn watchable(
        &self,
        resource: &ResourceRef,
        tx: &mpsc::UnboundedSender<WatchEvent>,
    ) -> Option<Api<RawObject>> {
        let mut wait = Duration::from_millis(200);
        loop {
            match self.resource(&resource.api_group, &resource.kind).await {
                Ok((r, _)) => return Some(Api::all_with(self.client.clone(), &r)),
                Err(e) => {
                    tracing::warn!(kind = %resource.kind, api = %resource.api_group, "cannot resolve the resource: {}", e.message);
                    if tx.is_closed() {
                        return None;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// The API of an object's resource, after waiting for the rate limit (every request
    /// goes through here).
    async fn api(
        &self,
        key: &ObjectKey,
        user: Option<&str>,
    ) -> Result<Api<RawObject>, ClusterError> {
        if let Some(t) = &self.throttle {
            t.acquire().await;
        }
        let (resource, caps) = self.resource(&key.api_version, &key.kind).await?;
        let client = self.client_as(user)?;
        Ok(match caps.scope {
            Scope::Namespaced => Api::namespaced_with(client, &key.namespace, &resource),
            Scope::Cluster => Api::all_with(client, &resource),
        })
    }
}

/// A kube-rs error as the engine classifies failures.
pub fn from_kube(e: &kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(status) => ClusterError {
            kind: FailureKind::Http,
            status: Some(status.code),
            reason: Some(status.reason.clone()).filter(|r| !r.is_empty()),
            message: status.message.clone(),
            retry_after: status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
        },
        other => {
            let text = format!("{other}: {}", error_chain(other));
            let lower = text.to_ascii_lowercase();
            let kind = if lower.contains("refused") {
                FailureKind::ConnectionRefused
            } else if lower.contains("reset") {
                FailureKind::ConnectionReset
            } else if lower.contains("timed out") || lower.contains("timeout") {
                FailureKind::Timeout
            } else if lower.contains("closed")
                || lower.contains("eof")
                || lower.contains("incomplete")
            {
                FailureKind::Eof
            } else {
                FailureKind::Other
            };
            ClusterError {
                kind,
                status: None,
                reason: None,
                message: text,
                retry_after: None,
            }
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}

/// The events of one watcher of `resource`: a relist is gathered into one
/// [`WatchEvent::Restarted`]; errors are retried with backoff (and logged at debug level).
///
/// Every object is given `resource`'s `apiVersion` and `kind`: a real API server leaves
/// them out of list items (only watch events carry them), and everything downstream
/// (object keys, the engine, IP pools, node gates) identifies objects by them.
fn events(
    api: Api<RawObject>,
    config: watcher::Config,
    resource: &ResourceRef,
) -> impl futures_util::Stream<Item = WatchEvent> + Send + use<> {
    let (api_version, kind) = (resource.api_group.clone(), resource.kind.clone());
    let to_value = move |o: RawObject| o.into_typed(&api_version, &kind);
    let mut relist: Vec<Arc<Value>> = Vec::new();
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let out = match event {
                Err(e) => {
                    tracing::debug!("watch error: {e}");
                    None
                }
                Ok(watcher::Event::Init) => {
                    relist.clear();
                    None
                }
                Ok(watcher::Event::InitApply(o)) => {
                    relist.push(Arc::new(to_value(o)));
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    Some(WatchEvent::Restarted(std::mem::take(&mut relist)))
                }
                Ok(watcher::Event::Apply(o)) => Some(WatchEvent::Applied(Arc::new(to_value(o)))),
                Ok(watcher::Event::Delete(o)) => Some(WatchEvent::Deleted(Arc::new(to_value(o)))),
            };
            std::future::ready(out)
        })
}

/// Whether the object a DELETE answered with is still there. kube-apiserver answers with
/// the object's last state whether it removed it or only marked it: a pod removed at the
/// end of a graceful deletion still carries its `deletionTimestamp` (and
/// `deletionGracePeriodSeconds: 0`). It remains only while a finalizer holds it or a grace
/// period runs.
pub(crate) fn remains_after_delete(answer: &Value) -> bool {
    let meta = &answer["metadata"];
    let marked = meta.get("deletionTimestamp").is_some_and(|t| !t.is_null());
    let held = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let grace = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
    marked && (held || grace > 0)
}

/// Whether a create failed because an object of that name exists (409 `AlreadyExists`,
/// as opposed to a 409 `Conflict` on a write's precondition).
fn already_exists(error: &ClusterError) -> bool {
    error.status == Some(409) && error.reason.as_deref() == Some("AlreadyExists")
}

fn node_ref() -> ResourceRef {
    ResourceRef {
        api_group: "v1".into(),
        kind: "Node".into(),
    }
}

/// The events of `stream` (nodes when `nodes`, else pods) for the nodes in `held`: an
/// object whose node is won is delivered then, one whose node is lost is reported gone.
fn held_only(
    stream: BoxStream<'static, WatchEvent>,
    held: super::managed::HeldNodes,
    nodes: bool,
) -> BoxStream<'static, WatchEvent> {
    enum Input {
        Object(WatchEvent),
        Held(std::collections::BTreeSet<String>),
    }
    let changes = futures_util::stream::unfold(held, |mut held| async move {
        held.changed().await.ok()?;
        let now = held.borrow_and_update().clone();
        Some((Input::Held(now), held))
    });
    let node_of = move |o: &Value| -> String {
        let pointer = if nodes {
            "/metadata/name"
        } else {
            "/spec/nodeName"
        };
        o.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut mine: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut seen: std::collections::BTreeMap<ObjectKey, Arc<Value>> = Default::default();
    futures_util::stream::select(stream.map(Input::Object), changes)
        .flat_map(move |input| {
            let mut out = Vec::new();
            match input {
                Input::Object(WatchEvent::Applied(o)) => {
                    if let Some(k) = ObjectKey::of(&o) {
                        seen.insert(k, o.clone());
                    }
                    if mine.contains(&node_of(&o)) {
                        out.push(WatchEvent::Applied(o));
                    }
                }
                Input::Object(WatchEvent::Deleted(o)) => {
                    if let Some(k) = ObjectKey::of(&o) {
                        seen.remove(&k);
                    }
                    if mine.contains(&node_of(&o)) {
                        out.push(WatchEvent::Deleted(o));
                    }
                }
                Input::Object(WatchEvent::Restarted(all)) => {
                    seen = all
                        .iter()
                        .filter_map(|o| Some((ObjectKey::of(o)?, o.clone())))
                        .collect();
                    let kept = all
                        .into_iter()
                        .filter(|o| mine.contains(&node_of(o)))
                        .collect();
                    out.push(WatchEvent::Restarted(kept));
                }
                Input::Held(now) => {
                    for o in seen.values() {
                        let node = node_of(o);
                        match (mine.contains(&node), now.contains(&node)) {
                            (false, true) => out.push(WatchEvent::Applied(o.clone())),
                            (true, false) => out.push(WatchEvent::Deleted(o.clone())),
                            _ => {}
                        }
                    }
                    mine = now;
                }
            }
            futures_util::stream::iter(out)
        })
        .boxed()
}

/// The node or the pod side of a gated pod watch.
enum Side {
    Node(WatchEvent),
    Pod(WatchEvent),
}

/// The watcher configuration of managed nodes.
fn node_config(selection: &ManagedNodes) -> watcher::Config {
    let (labels, fields) = selection.node_selectors();
    let mut config = watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    if let Some(fields) = fields {
        config = config.fields(&fields);
    }
    config
}

/// Keep the managed nodes of a node watch event; a node that stops matching is reported
/// gone.
fn select_nodes(selection: &ManagedNodes, event: WatchEvent) -> WatchEvent {
    match event {
        WatchEvent::Applied(n) if !selection.node_matches(&n) => WatchEvent::Deleted(n),
        WatchEvent::Restarted(nodes) => WatchEvent::Restarted(
            nodes
                .into_iter()
                .filter(|n| selection.node_matches(n))
                .collect(),
        ),
        other => other,
    }
}

/// The object as the engine holds it (see [`RawObject`]).
fn to_value(object: RawObject) -> Value {
    object.into_value()
}

fn kube_patch(patch_type: PatchType, data: Value) -> Result<Patch<Value>, ClusterError> {
    Ok(match patch_type {
        PatchType::Merge => Patch::Merge(data),
        PatchType::Strategic => Patch::Strategic(data),
        PatchType::Apply => Patch::Apply(data),
        PatchType::Json => Patch::Json(serde_json::from_value(data).map_err(|e| ClusterError {
            kind: FailureKind::Other,
            status: None,
            reason: None,
            message: format!("not a JSON patch: {e}"),
            retry_after: None,
        })?),
    })
}

fn patch_params(patch_type: PatchType) -> PatchParams {
    if patch_type == PatchType::Apply {
        PatchParams::apply(FIELD_MANAGER).force()
    } else {
        PatchParams::default()
    }
}

impl Cluster for KubeCluster {
    fn watch(&self, resource: &ResourceRef) -> mpsc::UnboundedReceiver<WatchEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let cluster = self.clone();
        let resource = resource.clone();
        tokio::spawn(async move {
            let Some(api) = cluster.watchable(&resource, &tx).await else {
                return;
            };
            let core = |kind: &str| resource.api_group == "v1" && resource.kind == kind;
            let selection = cluster.managed.clone();
            let mut object_config = watcher::Config::default();
            if let Some(labels) = cluster.objects.labels(&resource.api_group, &resource.kind) {
                object_config = object_config.labels(labels);
            }
            let stream: BoxStream<'static, WatchEvent> = if core("Node") {
                let selection = selection.clone();
                events(api, node_config(&selection), &resource)
                    .map(move |event| select_nodes(&selection, event))
                    .boxed()
            } else if core("Pod") && selection.gates_pods() {
                let Some(node_api) = cluster.watchable(&node_ref(), &tx).await else {
                    return;
                };
                let nodes = events(node_api, node_config(&selection), &node_ref()).map(Side::Node);
                let pods = events(api, object_config, &resource).map(Side::Pod);
                let mut gate = PodGate::default();
                let selection = selection.clone();
                futures_util::stream::select(nodes, pods)
                    .flat_map(move |side| {
                        let out: Vec<WatchEvent> = match side {
                            Side::Node(event) => gate
                                .node_event(&selection, &event)
                                .into_iter()
                                .map(WatchEvent::Applied)
                                .collect(),
                            Side::Pod(event) => gate.pod_event(event).into_iter().collect(),
                        };
                        futures_util::stream::iter(out)
                    })
                    .boxed()
            } else {
                let mut config = object_config;
                if core("Pod")
                    && let Some(fields) = selection.pod_fields()
                {
                    config = config.fields(&fields);
                }
                events(api, config, &resource).boxed()
            };
            // With node leases, only the objects of the nodes this replica holds.
            let mut stream = match (&cluster.held, core("Node") || core("Pod")) {
                (Some(held), true) => held_only(stream, held.clone(), core("Node")),
                _ => stream,
            };
            while let Some(event) = stream.next().await {
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        rx
    }

    async fn get(&self, key: &ObjectKey) -> Result<Arc<Value>, ClusterError> {
        let api = self.api(key, None).await?;
        let o = api.get(&key.name).await.map_err(|e| from_kube(&e))?;
        Ok(Arc::new(to_value(o)))
    }

    async fn create(&self, object: Value) -> Result<Arc<Value>, ClusterError> {
        let key = ObjectKey::of(&object).unwrap_or_default();
        let api = self.api(&key, None).await?;
        let o = api
            .create(&PostParams::default(), &RawObject::new(object))
            .await
            .map_err(|e| from_kube(&e))?;
        Ok(Arc::new(to_value(o)))
    }

    fn patch(
        &self,
        key: &ObjectKey,
        patch: PatchRequest<'_>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let subresource = patch.subresource.map(str::to_owned);
        let user = patch.as_user.map(str::to_owned);
        let patch_type = patch.patch_type;
        let data = patch.data;
        async move {
            let api = self.api(key, user.as_deref()).await?;
            let body = kube_patch(patch_type, data)?;
            let params = patch_params(patch_type);
            let o = match subresource.as_deref() {
                Some(sub) => api.patch_subresource(sub, &key.name, &params, &body).await,
                None => api.patch(&key.name, &params, &body).await,
            }
            .map_err(|e| from_kube(&e))?;
            Ok(Arc::new(to_value(o)))
        }
    }

    fn apply(
        &self,
        object: &Value,
        patch_type: PatchType,
        subresource: Option<&str>,
        as_user: Option<&str>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let mut key = ObjectKey::of(object).unwrap_or_default();
        let mut data = object.clone();
        let subresource = subresource.map(str::to_owned);
        let user = as_user.map(str::to_owned);
        async move {
            // An object of a cluster-scoped kind (by discovery) carries no namespace,
            // whatever its template inherited.
            if let Ok((_, caps)) = self.resource(&key.api_version, &key.kind).await
                && caps.scope == Scope::Cluster
                && !key.namespace.is_empty()
            {
                key.namespace.clear();
                if let Some(meta) = data.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("namespace");
                }
            }
            let request = PatchRequest {
                patch_type,
                subresource: subresource.as_deref(),
                data,
                as_user: user.as_deref(),
            };
            self.patch(&key, request).await
        }
    }

    async fn delete(
        &self,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> Result<Option<Arc<Value>>, ClusterError> {
        let api = self.api(key, None).await?;
        let params = DeleteParams {
            grace_period_seconds: grace_period_seconds.map(|g| g.max(0) as u32),
            ..DeleteParams::default()
        };
        let deleted = api
            .delete(&key.name, &params)
            .await
            .map_err(|e| from_kube(&e))?;
        Ok(deleted.left().and_then(|o| {
            let v = to_value(o);
            remains_after_delete(&v).then(|| Arc::new(v))
        }))
    }

    fn event(
        &self,
        key: &ObjectKey,
        event: &EventRequest,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send {
        let namespace = super::event::namespace(key).to_owned();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let body = super::event::body(key, event, &now);
        async move {
            if let Some(t) = &self.throttle {
                t.acquire().await;
            }
            let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
            let events: Api<RawObject> =
                Api::namespaced_with(self.client.clone(), &namespace, &resource);
            match events
                .create(&PostParams::default(), &RawObject::new(body))
                .await
            {
                Ok(_) => Ok(()),
                // A named event already there is this one, sent before (a Stage played
                // again after a restart or a handover): sent.
                Err(e) => {
                    let error = from_kube(&e);
                    if already_exists(&error) {
                        Ok(())
                    } else {
                        Err(error)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The body a real kube-apiserver answered a recorded DELETE with.
    fn answer(transcript: &str) -> Value {
        let path = std::path::Path::new(env!("KSTAGE_TRANSCRIPTS")).join(transcript);
        let text = std::fs::read_to_string(&path).expect("transcript");
        let exchange: Value = serde_json::from_str(&text).expect("JSON");
        exchange["response"]["body"].clone()
    }

    #[test]
    fn a_second_create_of_a_named_event_is_already_exists() {
        // What kube-apiserver answered a second create of the Event `rec-pod.1`.
        let status: kube::core::Status =
            serde_json::from_value(answer("19-event-create-again-409.json")).expect("a Status");
        let error = from_kube(&kube::Error::Api(Box::new(status)));
        assert!(already_exists(&error), "{error:?}");
        // A precondition conflict is not.
        let conflict: kube::core::Status = serde_json::from_value(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
            "reason": "Conflict", "message": "the object has been modified",
        }))
        .expect("a Status");
        assert!(!already_exists(&from_kube(&kube::Error::Api(Box::new(
            conflict
        )))));
    }

    #[test]
    fn a_delete_answer_says_whether_the_object_remains() {
        // A finalizer holds the pod: marked, still there.
        assert!(remains_after_delete(&answer(
            "21-delete-pod-with-finalizer.json"
        )));
        // The grace-0 delete that removes it answers with a deletionTimestamp too.
        assert!(!remains_after_delete(&answer("24-delete-pod-grace-0.json")));
        // A graceful pod deletion runs its grace period.
        let graceful = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                                           "deletionGracePeriodSeconds": 30}});
        assert!(remains_after_delete(&graceful));
        assert!(!remains_after_delete(
            &json!({"metadata": {"name": "gone"}})
        ));
    }
}
