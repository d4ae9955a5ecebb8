//! WebAssembly plugins: the wasmtime host for the three decisions kstage delegates (stage
//! selection, template rendering, retry classification) through `wit/kstage-plugin.wit`.
//!
//! ```text
//!  plugin file ─► runtime (compile once per digest) ─► loaded::Plugin (InstancePre,
//!                                                       warm instances, limits)
//!  config ─► set::PluginSet (named slots, swapped atomically) ─► delegate (the engine's
//!                                                                 selector/renderer/classifier)
//! ```
//!
//! - [`runtime`]: the wasmtime engine, epoch ticker, compile cache.
//! - [`host`]: a store's data: the `host` interface, memory limiter, WASI grants.
//! - [`loaded`]: one loaded plugin version and its calls.
//! - [`error`]: call and load errors as data; `trap`: a trap told with the guest's
//!   stderr and the top of its wasm backtrace; [`stderr`]: that stderr, kept per store.
//! - [`fetch`]: the content-addressed cache, and `url` downloads; [`oci`]: the OCI
//!   registry client (pull, push).
//! - [`rollout`]: a new version analysed beside the serving one (canary), then promoted
//!   or rolled back.

mod bindings;
pub mod cases;
pub mod convert;
pub mod config;
pub mod error;
pub mod fetch;
pub mod host;
pub mod invoke;
pub mod loaded;
mod offload;
pub mod oci;
pub mod resource;
pub mod rollout;
pub mod runtime;
pub mod set;
pub mod stderr;
mod trap;
pub mod watch;

pub use bindings::types;
pub use error::{CallError, Cause, LoadError};
pub use host::{Grants, HostEnv};
pub use loaded::{INTERFACE_VERSION, Info, Plugin, Settings};
pub use runtime::Runtime;
pub use set::PluginSet;

use serde::{Deserialize, Serialize};

/// What a plugin can do. `Metadata` is what every plugin exports; the others are the
/// decisions kstage delegates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    /// `metadata.info`.
    Metadata = 0,
    /// `selector.select`: which Stage an object plays next.
    Selector = 1,
    /// `renderer.render`: a step's template.
    Renderer = 2,
    /// `classifier.classify`: what a failed step does next.
    Classifier = 3,
}

impl Capability {
    /// The three delegated decisions.
    pub const DECISIONS: [Capability; 3] = [
        Capability::Selector,
        Capability::Renderer,
        Capability::Classifier,
    ];

    /// The interface name (`selector`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Metadata => "metadata",
            Capability::Selector => "selector",
            Capability::Renderer => "renderer",
            Capability::Classifier => "classifier",
        }
    }

    /// The Stage annotation that binds a plugin to this capability for that Stage.
    pub fn annotation(self) -> &'static str {
        match self {
            Capability::Metadata => "kstage.dev/metadata",
            Capability::Selector => "kstage.dev/selector",
            Capability::Renderer => "kstage.dev/renderer",
            Capability::Classifier => "kstage.dev/classifier",
        }
    }

    /// The exported function, as `interface.function`.
    pub fn export(self) -> &'static str {
        match self {
            Capability::Metadata => "metadata.info",
            Capability::Selector => "selector.select",
            Capability::Renderer => "renderer.render",
            Capability::Classifier => "classifier.classify",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Capability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "selector" => Ok(Capability::Selector),
            "renderer" => Ok(Capability::Renderer),
            "classifier" => Ok(Capability::Classifier),
            "metadata" => Ok(Capability::Metadata),
            other => Err(format!(
                "unknown capability {other:?} (expected selector, renderer or classifier)"
            )),
        }
    }
}

/// The pod the smoke calls of validation and `kstage plugin bench` use.
pub fn sample_pod() -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "kstage-smoke",
            "namespace": "default",
            "uid": "00000000-0000-0000-0000-000000000000",
            "resourceVersion": "1",
            "labels": {"app": "smoke"},
        },
        "spec": {
            "nodeName": "node-0",
            "containers": [{"name": "app", "image": "busybox"}],
        },
        "status": {"phase": "Pending"},
    })
    .to_string()
}
