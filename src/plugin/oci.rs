//! Plugins in an OCI registry: the registry client (`oci-client`), pulling a component
//! into the plugin cache ([`super::fetch`]) and pushing one (`kstage plugin push`).
//!
//! A plugin is a Wasm OCI artifact: a manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and exactly one layer of type
//! `application/wasm`, the component. A pull reads the manifest (by tag or by manifest
//! digest), checks that shape, checks the layer digest against the `sha256` the user
//! pinned (if any), and downloads the layer only when the cache lacks it; the download
//! is checked against the layer digest before it is cached as `SHA256.wasm`.
//!
//! A reference is `REGISTRY/REPOSITORY:TAG` or `REGISTRY/REPOSITORY@sha256:DIGEST`, with
//! an optional `oci://` prefix. A tag may move: [`OciSource::poll`] says how often it is
//! resolved again (by `plugin::watch` for the `--config` file, by the StagePlugin
//! controller for resources); a digest reference never moves and is never polled.
//!
//! Credentials: a `kubernetes.io/dockerconfigjson` Secret (StagePlugins), or the docker
//! config file (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`) for the
//! `--config` file and `kstage plugin push`; anonymous when neither names the registry.
//! `plainHttp` talks http instead of https, for a registry on loopback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::runtime::digest;

/// The config media type of a Wasm OCI artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer, the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// How often a tag is resolved again unless `pollInterval` says otherwise.
pub const DEFAULT_POLL: Duration = Duration::from_secs(60);
/// How long one pull or push may take.
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting to the registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest component pulled.
const MAX_BYTES: i64 = 64 << 20;

/// A plugin's registry source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciSource {
    /// `REGISTRY/REPOSITORY:TAG` or `...@sha256:DIGEST`, without `oci://`.
    pub reference: String,
    /// The component's digest the user pinned (lower-case hex), if any.
    pub pin: Option<String>,
    /// Talk http instead of https.
    pub plain_http: bool,
    /// How often the tag is resolved again; `None` for a digest reference (or
    /// `pollInterval: 0`).
    pub poll: Option<Duration>,
}

impl OciSource {
    /// A source from its fields as written; `poll` is a Go duration (default
    /// [`DEFAULT_POLL`], `0` never).
    ///
    /// # Errors
    /// A reference that does not parse, a `pollInterval` that is not a duration or is
    /// given with a digest reference.
    pub fn parse(
        reference: &str,
        pin: Option<String>,
        plain_http: bool,
        poll: Option<&str>,
    ) -> Result<Self, String> {
        let reference = reference.strip_prefix("oci://").unwrap_or(reference);
        let parsed = parse_reference(reference)?;
        let poll = match (poll, parsed.digest().is_some()) {
            (Some(_), true) => {
                return Err(format!(
                    "{reference:?} names a digest, which never moves: drop `pollInterval`"
                ));
            }
            (None, true) => None,
            (None, false) => Some(DEFAULT_POLL),
            (Some(text), false) => {
                let nanos = crate::go::parse_go_duration(text)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| format!("pollInterval: {text:?} is not a duration"))?;
                (nanos > 0).then(|| Duration::from_nanos(nanos as u64))
            }
        };
        Ok(Self {
            reference: reference.to_owned(),
            pin,
            plain_http,
            poll,
        })
    }

    /// The registry's host (and port).
    pub fn registry(&self) -> String {
        parse_reference(&self.reference)
            .map(|r| r.resolve_registry().to_owned())
            .unwrap_or_default()
    }
}

/// `REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]` (an `oci://` prefix allowed).
///
/// # Errors
/// Not a reference, or one without a tag or digest.
pub fn parse_reference(text: &str) -> Result<Reference, String> {
    let text = text.strip_prefix("oci://").unwrap_or(text);
    let reference: Reference = text
        .parse()
        .map_err(|e| format!("{text:?} is not an OCI reference: {e}"))?;
    if reference.tag().is_none() && reference.digest().is_none() {
        return Err(format!(
            "{text:?}: give a tag (REGISTRY/REPOSITORY:TAG) or a digest (@sha256:...)"
        ));
    }
    Ok(reference)
}

/// Credentials for a registry.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Auth {
    /// None.
    #[default]
    Anonymous,
    /// HTTP basic (a registry's token service is asked with them too).
    Basic {
        /// The user.
        username: String,
        /// The password or token.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Anonymous => f.write_str("Anonymous"),
            Auth::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
        }
    }
}

impl Auth {
    /// The docker config file's credentials for `registry` (`$DOCKER_CONFIG/config.json`,
    /// else `~/.docker/config.json`); anonymous when it has none (or is missing).
    ///
    /// # Errors
    /// The file exists but cannot be read or is not a docker config.
    pub fn docker_config(registry: &str) -> Result<Self, String> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let file = match (var("DOCKER_CONFIG"), var("HOME")) {
            (Some(dir), _) => PathBuf::from(dir).join("config.json"),
            (None, Some(home)) => PathBuf::from(home).join(".docker/config.json"),
            (None, None) => return Ok(Self::Anonymous),
        };
        match std::fs::read(&file) {
            Ok(bytes) => Self::from_docker_config(&bytes, registry)
                .map_err(|e| format!("{}: {e}", file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::Anonymous),
            Err(e) => Err(format!("{}: {e}", file.display())),
        }
    }

    /// The credentials a docker config (`{"auths": {REGISTRY: {"auth": base64(USER:PASSWORD)}
    /// or {"username", "password"}}}`, as in a `kubernetes.io/dockerconfigjson` Secret) has
    /// for `registry`; anonymous when it has none.
    ///
    /// # Errors
    /// Not JSON, or an entry for the registry that holds no credentials.
    pub fn from_docker_config(json: &[u8], registry: &str) -> Result<Self, String> {
        let config: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("not a docker config: {e}"))?;
        let Some(auths) = config.get("auths").and_then(serde_json::Value::as_object) else {
            return Ok(Self::Anonymous);
        };
        let Some(entry) = auths
            .iter()
            .find(|(key, _)| registry_of(key) == registry)
            .map(|(_, entry)| entry)
        else {
            return Ok(Self::Anonymous);
        };
        let text = |field: &str| entry.get(field).and_then(serde_json::Value::as_str);
        if let (Some(username), Some(password)) = (text("username"), text("password")) {
            return Ok(Self::Basic {
                username: username.to_owned(),
                password: password.to_owned(),
            });
        }
        let decoded = text("auth")
            .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
            .and_then(|a| String::from_utf8(a).ok())
            .ok_or_else(|| {
                format!("auths.{registry}: neither `auth` nor `username` and `password`")
            })?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| format!("auths.{registry}.auth: not USER:PASSWORD"))?;
        Ok(Self::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }

    fn registry_auth(&self) -> RegistryAuth {
        match self {
            Auth::Anonymous => RegistryAuth::Anonymous,
            Auth::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// The registry a docker config key names: `https://registry:5000/v1/` and
/// `registry:5000` alike.
fn registry_of(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

/// Why a pull or push failed; [`OciError::reason`] is the StagePlugin status reason.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// No connection, or no answer in time.
    #[error("registry {registry} unreachable: {detail}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// What failed.
        detail: String,
    },
    /// The registry refused the credentials (or asked for some).
    #[error("{reference}: the registry refused access, credentials missing or wrong ({detail})")]
    AuthRefused {
        /// The reference.
        reference: String,
        /// What it said.
        detail: String,
    },
    /// No such repository, tag or manifest.
    #[error("{reference}: not found in the registry ({detail})")]
    NotFound {
        /// The reference.
        reference: String,
        /// What it said.
        detail: String,
    },
    /// The manifest is not a Wasm component artifact.
    #[error("{reference}: not a Wasm component artifact: {why}")]
    NotWasm {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// The component's digest is not the one pinned (or the download not the layer's).
    #[error(
        "{reference}: sha256 mismatch: {expected_by} says {expected}, the registry's component is {found}"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// Who expected `expected`: `sha256`, or the manifest.
        expected_by: &'static str,
        /// The digest expected.
        expected: String,
        /// The digest found.
        found: String,
    },
    /// A reference, credentials or file that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// Anything else the registry or the cache did.
    #[error("{reference}: {detail}")]
    Failed {
        /// The reference.
        reference: String,
        /// What failed.
        detail: String,
    },
}

impl OciError {
    /// The StagePlugin status reason: `RegistryUnreachable`, `AuthRefused`,
    /// `NotFound`, `NotWasmArtifact`, `DigestMismatch`, `InvalidSpec` or `FetchFailed`.
    pub fn reason(&self) -> &'static str {
        match self {
            OciError::Unreachable { .. } => "RegistryUnreachable",
            OciError::AuthRefused { .. } => "AuthRefused",
            OciError::NotFound { .. } => "NotFound",
            OciError::NotWasm { .. } => "NotWasmArtifact",
            OciError::DigestMismatch { .. } => "DigestMismatch",
            OciError::Invalid(_) => "InvalidSpec",
            OciError::Failed { .. } => "FetchFailed",
        }
    }

    /// `error` from the client, about `reference`.
    fn classify(reference: &Reference, error: OciDistributionError) -> Self {
        let reference_text = reference.whole();
        let detail = innermost(&error);
        match &error {
            OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
                OciError::Unreachable {
                    registry: reference.resolve_registry().to_owned(),
                    detail,
                }
            }
            OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::ServerError {
                code: 401 | 403, ..
            } => OciError::AuthRefused {
                reference: reference_text,
                detail,
            },
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)
                }) =>
            {
                OciError::AuthRefused {
                    reference: reference_text,
                    detail,
                }
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::BlobUnknown
                    )
                }) =>
            {
                OciError::NotFound {
                    reference: reference_text,
                    detail,
                }
            }
            OciDistributionError::ImageManifestNotFoundError(_)
            | OciDistributionError::ServerError { code: 404, .. } => OciError::NotFound {
                reference: reference_text,
                detail,
            },
            OciDistributionError::UnsupportedMediaTypeError(_)
            | OciDistributionError::ManifestParsingError(_)
            | OciDistributionError::VersionedParsingError(_)
            | OciDistributionError::ImageIndexParsingNoPlatformResolverError => OciError::NotWasm {
                reference: reference_text,
                why: detail,
            },
            _ => OciError::Failed {
                reference: reference_text,
                detail,
            },
        }
    }
}

/// `error` and its sources, as one line (reqwest's own text hides the cause).
fn innermost(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        source = cause.source();
    }
    // Registries end their JSON error bodies with a newline.
    text.trim_end().to_owned()
}

/// A client talking `https`, or `http` with `plain_http`.
fn client(plain_http: bool) -> Client {
    // reqwest is built without a crypto provider of its own: kstage's TLS is ring's.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(TIMEOUT),
        user_agent: concat!("kstage/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    })
}

/// A component pulled into the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The manifest's digest (`sha256:...`): what the reference resolved to.
    pub manifest_digest: String,
    /// The component's digest (lower-case hex, the layer's).
    pub sha256: String,
    /// Its file in the cache.
    pub path: PathBuf,
}

/// Resolve `source` and bring its component into `cache` (downloaded only when missing).
///
/// # Errors
/// See [`OciError`].
pub async fn pull(source: &OciSource, auth: &Auth, cache: &Path) -> Result<Pulled, OciError> {
    let reference = parse_reference(&source.reference).map_err(OciError::Invalid)?;
    let timed_out = || OciError::Unreachable {
        registry: reference.resolve_registry().to_owned(),
        detail: format!("no answer within {TIMEOUT:?}"),
    };
    tokio::time::timeout(TIMEOUT, pull_reference(&reference, source, auth, cache))
        .await
        .unwrap_or_else(|_| Err(timed_out()))
}

async fn pull_reference(
    reference: &Reference,
    source: &OciSource,
    auth: &Auth,
    cache: &Path,
) -> Result<Pulled, OciError> {
    let client = client(source.plain_http);
    let (manifest, manifest_digest) = client
        .pull_image_manifest(reference, &auth.registry_auth())
        .await
        .map_err(|e| OciError::classify(reference, e))?;
    let layer = wasm_layer(reference, &manifest)?;
    let sha256 = layer
        .digest
        .strip_prefix("sha256:")
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| OciError::NotWasm {
            reference: reference.whole(),
            why: format!("layer digest {:?} is not a sha256", layer.digest),
        })?;
    if let Some(pin) = &source.pin
        && *pin != sha256
    {
        return Err(OciError::DigestMismatch {
            reference: reference.whole(),
            expected_by: "sha256",
            expected: pin.clone(),
            found: sha256,
        });
    }
    let cache_error = |e: std::io::Error| OciError::Failed {
        reference: reference.whole(),
        detail: format!("cannot write into the cache {}: {e}", cache.display()),
    };
    if let Some(path) = super::fetch::cached(cache, &sha256) {
        return Ok(Pulled {
            manifest_digest,
            sha256,
            path,
        });
    }
    if layer.size > MAX_BYTES {
        return Err(OciError::Failed {
            reference: reference.whole(),
            detail: format!(
                "the component has {} bytes, more than {MAX_BYTES}",
                layer.size
            ),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
    client
        .pull_blob(reference, layer, &mut bytes)
        .await
        .map_err(|e| OciError::classify(reference, e))?;
    let found = digest(&bytes);
    if found != sha256 {
        return Err(OciError::DigestMismatch {
            reference: reference.whole(),
            expected_by: "the manifest",
            expected: sha256,
            found,
        });
    }
    let path = super::fetch::store(cache, &sha256, &bytes).map_err(cache_error)?;
    tracing::info!(reference = %reference.whole(), %manifest_digest, %sha256, path = %path.display(), "plugin pulled");
    Ok(Pulled {
        manifest_digest,
        sha256,
        path,
    })
}

/// The one `application/wasm` layer of a Wasm artifact's manifest.
fn wasm_layer<'a>(
    reference: &Reference,
    manifest: &'a OciImageManifest,
) -> Result<&'a oci_client::manifest::OciDescriptor, OciError> {
    let not_wasm = |why: String| OciError::NotWasm {
        reference: reference.whole(),
        why,
    };
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its config is {:?}, not {CONFIG_MEDIA_TYPE:?} (push it with `kstage plugin push`)",
            manifest.config.media_type
        )));
    }
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == LAYER_MEDIA_TYPE => Ok(layer),
        [layer] => Err(not_wasm(format!(
            "its layer is {:?}, not {LAYER_MEDIA_TYPE:?}",
            layer.media_type
        ))),
        layers => Err(not_wasm(format!(
            "{} layers, not exactly one {LAYER_MEDIA_TYPE:?}",
            layers.len()
        ))),
    }
}

/// [`pull`] from synchronous code (config parsing), on a thread of its own.
///
/// # Errors
/// As [`pull`].
pub fn pull_blocking(source: &OciSource, auth: &Auth, cache: &Path) -> Result<Pulled, OciError> {
    let (source, auth, cache) = (source.clone(), auth.clone(), cache.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| OciError::Invalid(format!("starting a runtime: {e}")))?;
        runtime.block_on(pull(&source, &auth, &cache))
    })
    .join()
    .unwrap_or_else(|_| Err(OciError::Invalid("the pull thread panicked".to_owned())))
}

/// What a push made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest's digest (`sha256:...`): pin a reference with `@` and it.
    pub manifest_digest: String,
    /// The component's digest (lower-case hex): what `sha256` pins.
    pub sha256: String,
}

/// Push `component` to `reference` as a Wasm OCI artifact.
///
/// # Errors
/// See [`OciError`].
pub async fn push(
    component: &[u8],
    reference: &str,
    plain_http: bool,
    auth: &Auth,
) -> Result<Pushed, OciError> {
    let reference = parse_reference(reference).map_err(OciError::Invalid)?;
    let sha256 = digest(component);
    let config = serde_json::json!({
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [format!("sha256:{sha256}")],
    });
    let layer = ImageLayer::new(component.to_vec(), LAYER_MEDIA_TYPE.to_owned(), None);
    let config = Config::new(
        config.to_string().into_bytes(),
        CONFIG_MEDIA_TYPE.to_owned(),
        None,
    );
    let client = client(plain_http);
    let registry_auth = auth.registry_auth();
    let pushed = async {
        client
            .push(&reference, &[layer], config, &registry_auth, None)
            .await?;
        client
            .fetch_manifest_digest(&reference, &registry_auth)
            .await
    };
    let manifest_digest = tokio::time::timeout(TIMEOUT, pushed)
        .await
        .map_err(|_| OciError::Unreachable {
            registry: reference.resolve_registry().to_owned(),
            detail: format!("no answer within {TIMEOUT:?}"),
        })?
        .map_err(|e| OciError::classify(&reference, e))?;
    Ok(Pushed {
        manifest_digest,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_poll_intervals() {
        let tag = OciSource::parse("oci://127.0.0.1:5000/team/router:1.2", None, true, None)
            .expect("a tag");
        assert_eq!(tag.reference, "127.0.0.1:5000/team/router:1.2");
        assert_eq!(tag.registry(), "127.0.0.1:5000");
        assert_eq!(tag.poll, Some(DEFAULT_POLL));
        let never = OciSource::parse("registry.example/r:1", None, false, Some("0s")).expect("0s");
        assert_eq!(never.poll, None);
        let digest = format!("registry.example/r@sha256:{}", "a".repeat(64));
        assert_eq!(
            OciSource::parse(&digest, None, false, None)
                .expect("a digest")
                .poll,
            None
        );
        for (text, poll, expected) in [
            (digest.as_str(), Some("1m"), "never moves"),
            ("registry.example/r:1", Some("soon"), "not a duration"),
            ("registry.example/r:1", Some("-1s"), "not a duration"),
            ("Not A Reference!", None, "not an OCI reference"),
        ] {
            let error = OciSource::parse(text, None, false, poll).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn docker_config_credentials_by_registry() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("ann:secret");
        let config = serde_json::json!({"auths": {
            "https://127.0.0.1:5000/v1/": {"auth": encoded},
            "other.example": {"username": "bob", "password": "pw"},
            "broken.example": {"email": "x@example.com"},
        }})
        .to_string();
        let auth = |registry: &str| Auth::from_docker_config(config.as_bytes(), registry);
        assert_eq!(
            auth("127.0.0.1:5000").expect("found"),
            Auth::Basic {
                username: "ann".into(),
                password: "secret".into()
            }
        );
        assert_eq!(
            auth("other.example").expect("found"),
            Auth::Basic {
                username: "bob".into(),
                password: "pw".into()
            }
        );
        assert_eq!(auth("unknown.example").expect("none"), Auth::Anonymous);
        assert!(auth("broken.example").is_err());
        assert!(Auth::from_docker_config(b"{", "x").is_err());
        assert_eq!(
            format!("{:?}", auth("other.example").expect("found")),
            "Basic(bob, <redacted>)",
            "no password in logs"
        );
    }
}
