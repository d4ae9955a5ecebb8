//! The daemon config file's plugin section (`--config FILE`, YAML):
//!
//! ```yaml
//! plugins:
//! - name: chaos                  # referred to by bindings and Stage annotations
//!   path: plugins/chaos.wasm     # relative to the config file
//!   sha256: 3f1a...              # optional for `path` (pins the file), required for `url`
//! - name: remote
//!   url: https://example.com/p.wasm  # fetched when the config is read, into a cache
//!   sha256: 9b2c...              # (see `fetch`); the digest must match
//! - name: router
//!   oci: registry.example/team/router:1.2  # pulled from an OCI registry (see `oci`);
//!   pollInterval: 60s            # a tag is resolved again this often (0: never)
//!   plainHttp: false             # http instead of https (a local registry)
//!   timeout: 100ms               # per call (default 100ms)
//!   memory: 64Mi                 # linear memory per instance (default 128Mi)
//!   failurePolicy:               # per capability: fail | fallback (default: fail)
//!     selector: fallback
//!   wasi: {stdout: true}         # grants; default none (see `host::Grants`)
//!   rollout: {canary: 20}        # a new version analysed first (see `rollout`)
//! bindings:                      # the plugin deciding for every Stage, per capability
//!   classifier: chaos
//! ```
//!
//! A Stage overrides a global binding with the annotations `kstage.dev/selector`,
//! `kstage.dev/renderer` and `kstage.dev/classifier` (a plugin name, or `builtin`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::Capability;
use super::host::Grants;
use super::loaded::Settings;
use super::oci::OciSource;
use super::rollout::Rollout;
use crate::go::parse_go_duration;

/// What to do when a plugin call fails (trap, timeout, memory, malformed output, or an
/// `err` answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailurePolicy {
    /// The decision fails: a selection chooses nothing (the object is matched again when
    /// it changes or a plugin is swapped), a render fails its step (retried with
    /// backoff), a classification retries with the default backoff.
    #[default]
    Fail,
    /// kstage's built-in behaviour decides instead.
    Fallback,
}

/// Failure policy per capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    /// For `selector.select`.
    #[serde(default)]
    pub selector: FailurePolicy,
    /// For `renderer.render`.
    #[serde(default)]
    pub renderer: FailurePolicy,
    /// For `classifier.classify`.
    #[serde(default)]
    pub classifier: FailurePolicy,
}

impl Policies {
    /// The policy for `capability`.
    pub fn get(&self, capability: Capability) -> FailurePolicy {
        match capability {
            Capability::Selector => self.selector,
            Capability::Renderer => self.renderer,
            Capability::Classifier | Capability::Metadata => self.classifier,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPlugin {
    name: String,
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    oci: Option<String>,
    #[serde(default)]
    plain_http: Option<bool>,
    #[serde(default)]
    poll_interval: Option<String>,
    /// Text; a number (an unquoted digest of digits only) is refused with a hint.
    #[serde(default)]
    sha256: Option<serde_json::Value>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    memory: Option<serde_json::Value>,
    #[serde(default)]
    failure_policy: Policies,
    #[serde(default)]
    wasi: Grants,
    #[serde(default)]
    warm_instances: Option<usize>,
    #[serde(default)]
    rollout: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBindings {
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    renderer: Option<String>,
    #[serde(default)]
    classifier: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    plugins: Vec<RawPlugin>,
    #[serde(default)]
    bindings: RawBindings,
}

/// One configured plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// Its name in bindings and annotations.
    pub name: String,
    /// The component file (absolute, or relative to the working folder).
    pub path: PathBuf,
    /// The content it must have, when pinned.
    pub sha256: Option<String>,
    /// Limits and grants.
    pub settings: Settings,
    /// Failure policy per capability.
    pub policies: Policies,
    /// How a new version takes over (see [`super::rollout`]).
    pub rollout: Rollout,
    /// The registry it was pulled from (`oci:`), whose tag is resolved again.
    pub oci: Option<OciSource>,
}

/// The plugins and their global bindings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginConfig {
    /// The plugins, in file order.
    pub plugins: Vec<PluginSpec>,
    /// The plugin bound to each capability for every Stage.
    pub bindings: BTreeMap<Capability, String>,
}

/// A config file that cannot be used, with the field at fault.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {problem}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub problem: String,
}

/// `64Mi`, `1Gi`, `500M`, `1048576`: bytes.
pub fn parse_quantity(value: &serde_json::Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let text = value.as_str()?.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit {
        "" => 1,
        "k" => 1000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A `sha256` field: 64 hex digits, as text (YAML reads a digest of digits only as a
/// number: refused with a hint). Lower case.
pub(super) fn parse_sha256(value: &serde_json::Value, at: &str) -> Result<String, String> {
    let serde_json::Value::String(text) = value else {
        return Err(format!(
            "{at}: not text (YAML read it as a number): quote the digest"
        ));
    };
    let sha = text.to_ascii_lowercase();
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{at}: not a sha256 (64 hex digits)"));
    }
    Ok(sha)
}

/// A plugin's limits and grants from its `wasi`, `timeout`, `memory` and
/// `warmInstances` fields (`at(field)` names a field in errors); unset ones keep their
/// defaults.
pub(super) fn settings(
    grants: Grants,
    timeout: Option<&str>,
    memory: Option<&serde_json::Value>,
    warm: Option<usize>,
    at: &dyn Fn(&str) -> String,
) -> Result<Settings, String> {
    let mut settings = Settings {
        grants,
        ..Settings::default()
    };
    if let Some(timeout) = timeout {
        let nanos = parse_go_duration(timeout)
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{}: {timeout:?} is not a positive duration", at("timeout")))?;
        settings.timeout = Duration::from_nanos(nanos as u64);
    }
    if let Some(memory) = memory {
        settings.memory = parse_quantity(memory)
            .filter(|m| *m > 0)
            .ok_or_else(|| format!("{}: {memory} is not a size (e.g. 64Mi)", at("memory")))?;
    }
    if let Some(warm) = warm {
        settings.warm = warm;
    }
    Ok(settings)
}

/// Where `plugin`'s component is (`path`, fetched `url`, or pulled `oci`), the digest it
/// must have (`sha256` as given, or the registry's), and its registry source.
fn component(
    plugin: &mut RawPlugin,
    sha256: Option<String>,
    base: &Path,
    cache: &Path,
    at: &dyn Fn(&str) -> String,
) -> Result<(PathBuf, Option<String>, Option<OciSource>), String> {
    if plugin.oci.is_none() && (plugin.plain_http.is_some() || plugin.poll_interval.is_some()) {
        return Err(format!(
            "{}: `plainHttp` and `pollInterval` go with `oci`",
            at("oci")
        ));
    }
    let oci = plugin
        .oci
        .as_deref()
        .map(|reference| {
            OciSource::parse(
                reference,
                sha256.clone(),
                plugin.plain_http.unwrap_or(false),
                plugin.poll_interval.as_deref(),
            )
            .map_err(|e| format!("{}: {e}", at("oci")))
        })
        .transpose()?;
    let (path, sha256) = match (plugin.path.take(), plugin.url.take(), &oci) {
        (Some(path), None, None) => (base.join(path), sha256),
        (None, Some(url), None) => {
            let Some(sha) = &sha256 else {
                return Err(format!("{}: a `url` needs its `sha256`", at("sha256")));
            };
            let path =
                super::fetch::fetch(&url, sha, cache).map_err(|e| format!("{}: {e}", at("url")))?;
            (path, sha256)
        }
        (None, None, Some(source)) => {
            // Pinned and cached: read without asking the registry (as `url` is), so a
            // restart needs no network; a moved tag is found by the next poll.
            if let Some(path) = source
                .pin
                .as_deref()
                .and_then(|pin| super::fetch::cached(cache, pin))
            {
                return Ok((path, sha256, oci));
            }
            let auth = super::oci::Auth::docker_config(&source.registry())
                .map_err(|e| format!("{}: {e}", at("oci")))?;
            let pulled = super::oci::pull_blocking(source, &auth, cache)
                .map_err(|e| format!("{}: {e}", at("oci")))?;
            (pulled.path, Some(pulled.sha256))
        }
        (None, None, None) => {
            return Err(format!(
                "{}: `path` is required (or `url`, or `oci`)",
                at("path")
            ));
        }
        _ => {
            return Err(format!(
                "{}: give one of `path`, `url` and `oci`",
                at("path")
            ));
        }
    };
    Ok((path, sha256, oci))
}

impl PluginConfig {
    /// Read a config file.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            problem: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).map_err(|problem| ConfigError {
            file: path.display().to_string(),
            problem,
        })
    }

    /// Parse config text; relative plugin paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        Self::parse_with_cache(text, base, &super::fetch::cache_dir())
    }

    /// [`PluginConfig::parse`] with `url` plugins fetched into `cache`.
    ///
    /// # Errors
    /// As [`PluginConfig::parse`].
    pub fn parse_with_cache(text: &str, base: &Path, cache: &Path) -> Result<Self, String> {
        let value = crate::yaml::to_json(text).map_err(|e| e.to_string())?;
        let raw: RawConfig = serde_path_to_error::deserialize(value)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
        let mut config = PluginConfig::default();
        for (index, mut plugin) in raw.plugins.into_iter().enumerate() {
            let at = |field: &str| format!("plugins[{index}].{field}");
            if plugin.name.is_empty() || plugin.name == "builtin" {
                return Err(format!(
                    "{}: a plugin needs a name other than \"builtin\"",
                    at("name")
                ));
            }
            if config.plugins.iter().any(|p| p.name == plugin.name) {
                return Err(format!("{}: {:?} is listed twice", at("name"), plugin.name));
            }
            let sha256 = plugin
                .sha256
                .as_ref()
                .map(|v| parse_sha256(v, &at("sha256")))
                .transpose()?;
            let (path, sha256, oci) = component(&mut plugin, sha256, base, cache, &at)?;
            let settings = settings(
                plugin.wasi,
                plugin.timeout.as_deref(),
                plugin.memory.as_ref(),
                plugin.warm_instances,
                &at,
            )?;
            let rollout = plugin
                .rollout
                .as_ref()
                .map(|r| super::rollout::parse(r, &at("rollout")))
                .transpose()?
                .unwrap_or_default();
            config.plugins.push(PluginSpec {
                name: plugin.name,
                path,
                sha256,
                settings,
                policies: plugin.failure_policy,
                rollout,
                oci,
            });
        }
        for (capability, name) in [
            (Capability::Selector, raw.bindings.selector),
            (Capability::Renderer, raw.bindings.renderer),
            (Capability::Classifier, raw.bindings.classifier),
        ] {
            let Some(name) = name else { continue };
            if name != "builtin" && !config.plugins.iter().any(|p| p.name == name) {
                return Err(format!(
                    "bindings.{capability}: no plugin named {name:?} in `plugins`"
                ));
            }
            if name != "builtin" {
                config.bindings.insert(capability, name);
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_config_parses() {
        let text = "
plugins:
- name: chaos
  path: chaos.wasm
  sha256: 3F1A000000000000000000000000000000000000000000000000000000000000
  timeout: 250ms
  memory: 64Mi
  failurePolicy: {selector: fallback}
  wasi: {stdout: true, env: [HOME]}
bindings:
  selector: chaos
  classifier: builtin
";
        let config = PluginConfig::parse(text, Path::new("/etc/kstage")).expect("parses");
        let chaos = &config.plugins[0];
        assert_eq!(chaos.path, Path::new("/etc/kstage/chaos.wasm"));
        assert_eq!(chaos.sha256.as_deref().map(|s| &s[..4]), Some("3f1a"));
        assert_eq!(chaos.settings.timeout, Duration::from_millis(250));
        assert_eq!(chaos.settings.memory, 64 << 20);
        assert!(chaos.settings.grants.stdout);
        assert_eq!(
            chaos.policies.get(Capability::Selector),
            FailurePolicy::Fallback
        );
        assert_eq!(
            chaos.policies.get(Capability::Renderer),
            FailurePolicy::Fail
        );
        assert_eq!(
            config
                .bindings
                .get(&Capability::Selector)
                .map(String::as_str),
            Some("chaos")
        );
        assert!(!config.bindings.contains_key(&Capability::Classifier));
    }

    #[test]
    fn mistakes_name_their_field() {
        let cases = [
            (
                "plugins: [{name: a}]",
                "plugins[0].path: `path` is required (or `url`, or `oci`)",
            ),
            (
                "plugins: [{name: a, path: a.wasm, timeout: soon}]",
                "plugins[0].timeout",
            ),
            (
                "plugins: [{name: a, path: a.wasm, memory: lots}]",
                "plugins[0].memory",
            ),
            (
                "plugins: [{name: a, path: a.wasm, sha256: abc}]",
                "plugins[0].sha256",
            ),
            (
                "plugins: [{name: a, path: a.wasm}, {name: a, path: b.wasm}]",
                "listed twice",
            ),
            (
                "plugins: [{name: a, url: 'https://x/a.wasm', sha256: abc}]",
                "plugins[0].sha256: not a sha256",
            ),
            (
                "plugins: [{name: a, path: a.wasm, sha256: 1234}]",
                "quote the digest",
            ),
            (
                "plugins: [{name: a, url: 'https://x/a.wasm'}]",
                "plugins[0].sha256: a `url` needs its `sha256`",
            ),
            (
                "plugins: [{name: a, url: 'ftp://x/a.wasm', sha256: '0000000000000000000000000000000000000000000000000000000000000000'}]",
                "only http and https",
            ),
            (
                "bindings: {renderer: ghost}",
                "bindings.renderer: no plugin named \"ghost\"",
            ),
            (
                "plugins: [{name: a, path: a.wasm, failurePolicy: {selector: maybe}}]",
                "plugins[0].failurePolicy.selector",
            ),
            ("plugins: [{name: a, path: a.wasm, colour: red}]", "colour"),
            (
                "plugins: [{name: a, path: a.wasm, wasi: {files: true}}]",
                "files",
            ),
        ];
        for (text, expected) in cases {
            let error = PluginConfig::parse(text, Path::new(".")).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_pinned_oci_plugin_in_the_cache_needs_no_registry() {
        let cache = std::env::temp_dir().join(format!("kstage-oci-cache-{}", std::process::id()));
        let bytes = b"\0asm component bytes".to_vec();
        let sha = super::super::runtime::digest(&bytes);
        super::super::fetch::store(&cache, &sha, &bytes).expect("cached");
        // Port 9 on loopback: nothing listens.
        let pinned = format!(
            "plugins: [{{name: a, oci: '127.0.0.1:9/a:1', plainHttp: true, sha256: '{sha}'}}]"
        );
        let config = PluginConfig::parse_with_cache(&pinned, Path::new("."), &cache)
            .expect("read from the cache");
        let spec = &config.plugins[0];
        assert_eq!(spec.path, cache.join(format!("{sha}.wasm")));
        assert_eq!(spec.sha256.as_deref(), Some(sha.as_str()));
        assert!(spec.oci.as_ref().is_some_and(|o| o.plain_http));
        let unpinned = "plugins: [{name: a, oci: '127.0.0.1:9/a:1', plainHttp: true}]";
        let error = PluginConfig::parse_with_cache(unpinned, Path::new("."), &cache)
            .expect_err("the registry is asked");
        assert!(
            error.contains("plugins[0].oci: registry 127.0.0.1:9 unreachable"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn quantities() {
        use serde_json::json;
        assert_eq!(parse_quantity(&json!("64Mi")), Some(64 << 20));
        assert_eq!(parse_quantity(&json!("1Gi")), Some(1 << 30));
        assert_eq!(parse_quantity(&json!("500M")), Some(500_000_000));
        assert_eq!(parse_quantity(&json!(4096)), Some(4096));
        assert_eq!(parse_quantity(&json!("12 parsecs")), None);
    }
}
