//! The content-addressed plugin cache (`DIR/SHA256.wasm`), and the plugins given by
//! `url`: downloaded once into it, checked against the `sha256` the config requires, and
//! read from the cache afterwards (a restart needs no network when the file is there).
//! Components from a ConfigMap or an OCI registry ([`super::oci`]) are kept the same way
//! ([`store`], [`cached`]).
//!
//! The cache folder is `$KSTAGE_PLUGIN_CACHE`, else `$XDG_CACHE_HOME/kstage/plugins`,
//! else `$HOME/.cache/kstage/plugins`, else `kstage-plugins` in the temporary folder.
//! `http` and `https` (the system's root certificates) are fetched; at most 64 MiB, 30
//! seconds, 5 redirects.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};

use super::runtime::digest;

/// The largest plugin fetched.
const MAX_BYTES: usize = 64 << 20;
/// How long a fetch may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed.
const MAX_REDIRECTS: usize = 5;

/// The cache folder (see the module docs).
pub fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("KSTAGE_PLUGIN_CACHE") {
        return dir.into();
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("kstage/plugins");
    }
    if let Some(home) = var("HOME") {
        return PathBuf::from(home).join(".cache/kstage/plugins");
    }
    std::env::temp_dir().join("kstage-plugins")
}

/// The file of the plugin at `url` whose content has digest `sha256` (lower-case hex): the
/// cached copy, else downloaded into `cache`.
///
/// # Errors
/// What went wrong, with the URL: the request, its status, its size, a digest that does
/// not match, or the cache folder.
pub fn fetch(url: &str, sha256: &str, cache: &Path) -> Result<PathBuf, String> {
    let sha256 = sha256.to_ascii_lowercase();
    if let Some(path) = cached(cache, &sha256) {
        return Ok(path);
    }
    let bytes = download(url)?;
    let got = digest(&bytes);
    if got != sha256 {
        return Err(format!(
            "{url}: sha256 mismatch: the config says {sha256}, the download is {got}"
        ));
    }
    let path = store(cache, &sha256, &bytes).map_err(|e| {
        format!(
            "{url}: cannot write into the cache {}: {e}",
            cache.display()
        )
    })?;
    tracing::info!(%url, path = %path.display(), "plugin fetched");
    Ok(path)
}

/// The cached file of the component whose digest is `sha256` (lower-case hex), if the
/// cache holds it intact.
pub fn cached(cache: &Path, sha256: &str) -> Option<PathBuf> {
    let path = cache.join(format!("{sha256}.wasm"));
    std::fs::read(&path)
        .is_ok_and(|bytes| digest(&bytes) == sha256)
        .then_some(path)
}

/// Keep `bytes` (whose digest is `sha256`, lower-case hex) in `cache` as `SHA256.wasm`;
/// the file's path.
///
/// # Errors
/// The cache folder cannot be created or written.
pub fn store(cache: &Path, sha256: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    if let Some(path) = cached(cache, sha256) {
        return Ok(path);
    }
    std::fs::create_dir_all(cache)?;
    // Written aside and renamed: a reader never sees half a file.
    let path = cache.join(format!("{sha256}.wasm"));
    let partial = cache.join(format!(".{sha256}.{}.part", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// GET `url` on a thread of its own (callers may be inside or outside a runtime).
fn download(url: &str) -> Result<Vec<u8>, String> {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("{url}: {e}"))?;
        runtime.block_on(async {
            tokio::time::timeout(TIMEOUT, get(&url))
                .await
                .unwrap_or_else(|_| Err(format!("{url}: no answer within {TIMEOUT:?}")))
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the download thread panicked".to_owned()))
}

async fn get(url: &str) -> Result<Vec<u8>, String> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("{url}: no root certificates: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<bytes::Bytes>>(connector);
    let mut target: http::Uri = url.parse().map_err(|e| format!("{url}: not a URL: {e}"))?;
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(target.scheme_str(), Some("http" | "https")) {
            return Err(format!("{target}: only http and https URLs are fetched"));
        }
        let response = client
            .get(target.clone())
            .await
            .map_err(|e| format!("{target}: {e}"))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{target}: {status} without a Location"))?;
            target = resolve(&target, location)?;
            continue;
        }
        if !status.is_success() {
            return Err(format!("{target}: HTTP {status}"));
        }
        let body = Limited::new(response.into_body(), MAX_BYTES)
            .collect()
            .await
            .map_err(|e| format!("{target}: {e} (at most {MAX_BYTES} bytes)"))?;
        return Ok(body.to_bytes().to_vec());
    }
    Err(format!("{url}: more than {MAX_REDIRECTS} redirects"))
}

/// A `Location` relative to `base` (absolute URLs and absolute paths).
fn resolve(base: &http::Uri, location: &str) -> Result<http::Uri, String> {
    if location.contains("://") {
        return location
            .parse()
            .map_err(|e| format!("{base}: bad redirect {location:?}: {e}"));
    }
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(
        location
            .parse()
            .map_err(|e| format!("{base}: bad redirect {location:?}: {e}"))?,
    );
    http::Uri::from_parts(parts).map_err(|e| format!("{base}: bad redirect {location:?}: {e}"))
}
