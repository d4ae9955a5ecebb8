//! A StagePlugin's `oci` source: its pull secret (a `kubernetes.io/dockerconfigjson`
//! Secret) read through the API, the pull into the plugin cache ([`crate::plugin::oci`]),
//! and a failure as the status reason and message the `Fetched` condition shows.
//!
//! Reasons: those of [`OciError::reason`] (`RegistryUnreachable`, `AuthRefused`,
//! `NotFound`, `NotWasmArtifact`, `DigestMismatch`, `FetchFailed`), and
//! `PullSecretInvalid` for a Secret that is missing, of another type or unreadable.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use crate::cluster::client::KubeCluster;
use crate::cluster::{Cluster, ObjectKey};
use crate::plugin::oci::{self, Auth, OciError, OciSource, Pulled};

/// The Secret type a pull secret must have.
pub const PULL_SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";

/// Why a pull failed: the status reason, and the message.
pub type PullFailure = (&'static str, String);

/// Pull `source` into `cache`, with the credentials of `pull_secret` (namespace, name)
/// for its registry.
pub async fn pull(
    cluster: &KubeCluster,
    source: &OciSource,
    pull_secret: Option<&(String, String)>,
    cache: &Path,
) -> Result<Pulled, PullFailure> {
    let auth = match pull_secret {
        Some((namespace, name)) => credentials(cluster, namespace, name, &source.registry())
            .await
            .map_err(|message| ("PullSecretInvalid", message))?,
        None => Auth::Anonymous,
    };
    oci::pull(source, &auth, cache).await.map_err(|e| {
        let message = match (&e, pull_secret) {
            (OciError::AuthRefused { .. }, Some((namespace, name))) => {
                format!("{e} (pull secret {namespace}/{name})")
            }
            _ => e.to_string(),
        };
        (e.reason(), message)
    })
}

/// The credentials for `registry` in the Secret `namespace/name`.
async fn credentials(
    cluster: &KubeCluster,
    namespace: &str,
    name: &str,
    registry: &str,
) -> Result<Auth, String> {
    let at = format!("pull secret {namespace}/{name}");
    let secret = cluster
        .get(&ObjectKey {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
        .await
        .map_err(|e| format!("{at}: {}", e.message))?;
    let kind = secret.get("type").and_then(Value::as_str).unwrap_or("");
    if kind != PULL_SECRET_TYPE {
        return Err(format!("{at}: type {kind:?}, not {PULL_SECRET_TYPE:?}"));
    }
    let config = secret
        .pointer("/data/.dockerconfigjson")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}: no data[.dockerconfigjson]"))?;
    let config = base64::engine::general_purpose::STANDARD
        .decode(config)
        .map_err(|e| format!("{at}: data[.dockerconfigjson]: {e}"))?;
    let auth = Auth::from_docker_config(&config, registry).map_err(|e| format!("{at}: {e}"))?;
    if auth == Auth::Anonymous {
        return Err(format!("{at}: no credentials for the registry {registry}"));
    }
    Ok(auth)
}
