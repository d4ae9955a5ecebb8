//! The embedded Kubernetes API server: real Kubernetes HTTP over the in-memory store,
//! so kube-rs and kubectl talk to it unchanged. It backs `kstage apiserver`, the end to
//! end tests and the benchmarks; real clusters remain the production target.
//!
//! - [`resources`]: what is served (built-in kinds, CRD-defined kinds) and discovery;
//! - [`state`]: the store, and one watch history per kind;
//! - [`request`]: routes and query parameters; [`select`]: label and field selectors;
//! - [`handler`]: one request, verb by verb; [`watch`]: watch streams;
//! - [`protobuf`]: protobuf request bodies; [`review`]: access and identity reviews;
//!   [`scale`]: the scale subresource of Deployments;
//! - [`table`]: `kubectl get` tables; [`reply`]: bodies and `Status` errors;
//! - here: the listener (HTTP/1.1, optional TLS with a generated CA, optional bearer
//!   token), connection resets for fault injection, and the kubeconfig.
//!
//! Where it differs from a real API server is listed in the README ("The embedded API
//! server").

pub mod audit;
pub mod handler;
pub mod protobuf;
pub mod reply;
pub mod request;
pub mod resources;
pub mod review;
pub mod scale;
pub mod select;
pub mod state;
pub mod table;
pub mod watch;

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::cluster::faults::{FaultSpec, Faults};
use state::State;

/// The Kubernetes version the server says it is.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// How to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free one.
    pub address: SocketAddr,
    /// Serve HTTPS with a generated certificate authority (written into the kubeconfig).
    pub tls: bool,
    /// Require `Authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// Faults to inject.
    pub faults: FaultSpec,
    /// Seed of the fault draws.
    pub fault_seed: u64,
    /// How long a request drawn for `timeout` hangs before its 504.
    pub fault_timeout: Duration,
    /// A watch drawn for `close` ends after a uniform random time below this.
    pub watch_close_max: Duration,
    /// Watch events kept per kind (older resourceVersions get 410 Gone).
    pub history_limit: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_every: Duration,
    /// Every write (create, update, patch, apply, delete) waits this long before it is
    /// stored, as a real API server waits for etcd to commit (zero: none).
    pub write_latency: Duration,
    /// A connection that has not sent a request's headers (or finished its TLS
    /// handshake) this long after it opened or after its last answer is closed: silent
    /// and half-sent connections do not hold the server's file descriptors.
    pub header_read_timeout: Duration,
    /// Open connections at most (watches included); one more is closed at once.
    pub max_connections: usize,
    /// Append an `audit.k8s.io/v1` event per request to this file (see [`audit`]).
    pub audit_log: Option<std::path::PathBuf>,
}

/// The default [`Config::max_connections`]: the file descriptors this process may open,
/// less a reserve for its own files and `accept` itself.
fn default_max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(65_536);
    usize::try_from(limit.saturating_sub(64))
        .unwrap_or(usize::MAX)
        .max(16)
}

impl Default for Config {
    fn default() -> Self {
        Self {
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            token: None,
            faults: FaultSpec::none(),
            fault_seed: 1,
            fault_timeout: Duration::from_secs(5),
            watch_close_max: Duration::from_secs(2),
            history_limit: 50_000,
            bookmark_every: Duration::from_secs(5),
            write_latency: Duration::ZERO,
            header_read_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            audit_log: None,
        }
    }
}

/// What every connection shares.
#[derive(Debug)]
pub struct Server {
    /// The objects.
    pub state: State,
    /// The fault injector.
    pub faults: Faults,
    /// How it serves.
    pub config: Config,
    /// Timestamps and ages.
    pub clock: Arc<dyn Clock>,
    /// `host:port` as clients reach it.
    pub address: String,
    /// Where each request is recorded, if anywhere.
    pub audit: Option<Arc<audit::AuditLog>>,
    /// Watches ended with `ERROR` 410 Expired (their resourceVersion older than the
    /// history kept), for tests.
    pub expired_watches: std::sync::atomic::AtomicU64,
}

/// A generated certificate authority and the server certificate it signed.
#[derive(Debug, Clone)]
pub struct Certificates {
    /// The CA certificate, PEM (goes into the kubeconfig).
    pub ca_pem: String,
    server_der: Vec<u8>,
    key_der: Vec<u8>,
}

impl Certificates {
    /// A new CA and a certificate for `localhost` and `127.0.0.1` signed by it.
    pub fn generate() -> Result<Self, rcgen::Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "kstage-ca");
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut leaf =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "kstage-apiserver");
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            server_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }

    /// The certificates as a state file keeps them (DER in base64).
    pub fn to_json(&self) -> serde_json::Value {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        serde_json::json!({
            "caPEM": self.ca_pem,
            "serverDER": b64.encode(&self.server_der),
            "keyDER": b64.encode(&self.key_der),
        })
    }

    /// What [`Certificates::to_json`] wrote.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str);
        Some(Self {
            ca_pem: field("caPEM")?.to_owned(),
            server_der: b64.decode(field("serverDER")?).ok()?,
            key_der: b64.decode(field("keyDER")?).ok()?,
        })
    }

    fn acceptor(&self) -> io::Result<tokio_rustls::TlsAcceptor> {
        use tokio_rustls::rustls::{self, pki_types};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = pki_types::PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(vec![self.server_der.clone().into()], key)
            .map_err(io::Error::other)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// A running API server; dropping it stops accepting connections.
#[derive(Debug)]
pub struct ApiServer {
    server: Arc<Server>,
    addr: SocketAddr,
    certificates: Option<Certificates>,
    accept: JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ApiServer {
    /// Listen and serve (on the current tokio runtime).
    pub async fn start(config: Config) -> io::Result<Self> {
        Self::start_with(config, None).await
    }

    /// [`ApiServer::start`], serving the objects of `snapshot` ([`ApiServer::snapshot`],
    /// a previous run's) instead of an empty cluster, with the same certificates.
    pub async fn start_with(
        config: Config,
        snapshot: Option<&serde_json::Value>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(config.address).await?;
        let addr = listener.local_addr()?;
        // A restarted server keeps its certificate authority: clients keep trusting it.
        let kept = snapshot
            .and_then(|s| s.get("certificates"))
            .and_then(Certificates::from_json);
        let certificates = match (config.tls, kept) {
            (false, _) => None,
            (true, Some(kept)) => Some(kept),
            (true, None) => Some(Certificates::generate().map_err(io::Error::other)?),
        };
        let acceptor = certificates
            .as_ref()
            .map(Certificates::acceptor)
            .transpose()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let audit = match &config.audit_log {
            Some(path) => Some(Arc::new(audit::AuditLog::open(path).map_err(|e| {
                io::Error::new(e.kind(), format!("audit log {}: {e}", path.display()))
            })?)),
            None => None,
        };
        let server = Arc::new(Server {
            audit,
            expired_watches: std::sync::atomic::AtomicU64::new(0),
            state: match snapshot {
                None => State::new(clock.clone(), config.history_limit),
                Some(snapshot) => State::restored(clock.clone(), config.history_limit, snapshot)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            },
            faults: Faults::new(config.faults.clone(), config.fault_seed),
            config,
            clock,
            address: addr.to_string(),
        });
        let limits = Limits {
            header_read_timeout: server.config.header_read_timeout,
            connections: Arc::new(tokio::sync::Semaphore::new(
                server.config.max_connections.max(1),
            )),
        };
        let accept = tokio::spawn(accept_loop(listener, server.clone(), acceptor, limits));
        Ok(Self {
            server,
            addr,
            certificates,
            accept,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop taking writes (they answer 503 from now on) and return what a restart needs
    /// to go on where this server stops: its objects and counters ([`State::close`],
    /// nothing acknowledged missing) and its certificates, if it serves TLS.
    pub fn close(&self) -> serde_json::Value {
        self.with_certificates(self.server.state.close())
    }

    fn with_certificates(&self, mut snapshot: serde_json::Value) -> serde_json::Value {
        if let Some(c) = &self.certificates {
            snapshot["certificates"] = c.to_json();
        }
        snapshot
    }

    /// `http://127.0.0.1:PORT` or `https://...`.
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The shared state (objects, fault injector).
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// A kubeconfig (YAML) that points kubectl and kube-rs at this server.
    pub fn kubeconfig(&self) -> String {
        let mut cluster = format!("    server: {}\n", self.url());
        if let Some(c) = &self.certificates {
            let ca = base64::engine::general_purpose::STANDARD.encode(c.ca_pem.as_bytes());
            cluster.push_str(&format!("    certificate-authority-data: {ca}\n"));
        }
        let user = match &self.server.config.token {
            Some(t) => format!("    token: {t:?}\n"),
            None => "    username: kstage\n".to_owned(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kstage\n  cluster:\n{cluster}contexts:\n- name: kstage\n  context:\n    cluster: kstage\n    user: kstage\n    namespace: default\ncurrent-context: kstage\nusers:\n- name: kstage\n  user:\n{user}"
        )
    }

    /// Write [`ApiServer::kubeconfig`] to `path` (readable by the owner only).
    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.kubeconfig())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(())
    }
}

/// What bounds the connections of a server.
#[derive(Clone)]
struct Limits {
    header_read_timeout: Duration,
    connections: Arc<tokio::sync::Semaphore>,
}

async fn accept_loop(
    listener: TcpListener,
    server: Arc<Server>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
) {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limits.connections.clone().try_acquire_owned() else {
            // Closed at once rather than left waiting: the client sees it and retries.
            tracing::debug!(
                "{} connections open already: closing a new one",
                limits.connections.available_permits()
            );
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let server = server.clone();
        let acceptor = acceptor.clone();
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match acceptor {
                None => Stream::Plain(tcp),
                Some(a) => match tokio::time::timeout(timeout, a.accept(tcp)).await {
                    Ok(Ok(tls)) => Stream::Tls(Box::new(tls)),
                    Ok(Err(e)) => {
                        tracing::debug!("TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake not done within {timeout:?}");
                        return;
                    }
                },
            };
            serve_connection(stream, server, timeout).await;
        });
    }
}

async fn serve_connection(stream: Stream, server: Arc<Server>, header_read_timeout: Duration) {
    let reset = Arc::new(AtomicBool::new(false));
    let io = Io {
        stream,
        reset: reset.clone(),
    };
    let service = service_fn(move |req| {
        let server = server.clone();
        let reset = reset.clone();
        async move {
            let result = handler::handle(server, req).await;
            if matches!(result, Err(handler::Abort::Reset)) {
                reset.store(true, Ordering::Relaxed);
            }
            result
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(io), service);
    match conn.without_shutdown().await {
        Ok(parts) => lingering_close(parts.io.into_inner()).await,
        Err(e) => tracing::debug!("connection ended: {e}"),
    }
}

/// How long a closing connection's unread input is still read and dropped.
const LINGER: Duration = Duration::from_secs(2);

/// Close a connection the way Go's HTTP server (and so kube-apiserver) does: send FIN,
/// then read and drop what the client still sends for up to [`LINGER`]. Closing with
/// unread input sends RST instead, and a client still uploading a body the server refused
/// (a 413) would see a broken pipe in place of the answer.
async fn lingering_close(mut io: Io) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if io.reset.load(Ordering::Relaxed) || io.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 16 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// A plain or TLS connection.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// A connection that can be reset: when a handler asked for a reset, dropping it sends
/// RST instead of FIN.
struct Io {
    stream: Stream,
    reset: Arc<AtomicBool>,
}

impl Drop for Io {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            let tcp = match &self.stream {
                Stream::Plain(t) => t,
                Stream::Tls(t) => t.get_ref().0,
            };
            let _ = tcp.set_zero_linger();
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}
