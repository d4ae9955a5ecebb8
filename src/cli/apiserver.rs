//! `kstage apiserver`: serve the embedded Kubernetes API server and write a kubeconfig.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use crate::apiserver::{ApiServer, Config};
use crate::cluster::faults::FaultSpec;

/// Serve a Kubernetes-compatible API server from memory.
#[derive(Debug, clap::Args)]
pub struct ApiServerArgs {
    /// Address to listen on (loopback by default: the server has no authorization).
    #[arg(long, default_value = "127.0.0.1")]
    address: IpAddr,
    /// Port; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Serve HTTPS with a generated certificate authority (written into the kubeconfig).
    #[arg(long)]
    tls: bool,
    /// Require this bearer token (written into the kubeconfig). Implies `--tls`: kubectl
    /// and client-go send no bearer token over plain http, so a token-only server would
    /// refuse every one of their requests.
    #[arg(long, env = "KSTAGE_APISERVER_TOKEN")]
    token: Option<String>,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "kstage.kubeconfig")]
    kubeconfig: PathBuf,
    /// Objects to create at start (YAML files or folders; CRDs first).
    #[arg(long = "load", num_args = 1..)]
    load: Vec<PathBuf>,
    /// Faults to inject: `VERB[/RESOURCE]:FAULT=RATE,...` (see `kstage apiserver --help`);
    /// changeable at runtime with `PUT /kstage/faults`.
    #[arg(long, default_value = "")]
    faults: FaultSpec,
    /// Seed of the fault draws.
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
    /// How long a request drawn for `timeout` hangs before its 504.
    #[arg(long, default_value = "5s", value_parser = super::duration::parse_std_duration)]
    fault_timeout: Duration,
    /// A watch drawn for `close` is closed after a random time below this.
    #[arg(long, default_value = "2s", value_parser = super::duration::parse_std_duration)]
    watch_close_max: Duration,
    /// Watch events kept per kind; a watch from an older resourceVersion gets 410 Gone.
    #[arg(long, default_value_t = 50_000)]
    history: usize,
    /// Every write waits this long before it is stored, like a real API server's etcd
    /// commit (e.g. `2ms`); default none.
    #[arg(long, default_value = "0s", value_parser = super::duration::parse_std_duration)]
    write_latency: Duration,
    /// A connection that has sent no request headers (or TLS handshake) this long after
    /// it opened or after its last answer is closed.
    #[arg(long, default_value = "30s", value_parser = super::duration::parse_std_duration)]
    header_read_timeout: Duration,
    /// Open connections at most (watches included); default: the file-descriptor limit
    /// less 64.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Append one `audit.k8s.io/v1` Event per request to this file (JSON lines, level
    /// Metadata, as kube-apiserver's `--audit-log-path`): which client asked what.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Keep the cluster's state in this file across restarts: read at start when it
    /// exists, written when the server stops (SIGTERM or Ctrl-C). A restarted server
    /// serves the same objects and goes on from their resourceVersions; the watch
    /// history is not kept, so a watch resuming from before the restart gets 410 Gone and
    /// its client lists again, as after an etcd compaction. (A SIGKILL loses the changes
    /// since the last stop.) With `--tls` the certificate authority is kept too, so
    /// clients keep trusting the restarted server.
    #[arg(long)]
    state: Option<PathBuf>,
}

impl ApiServerArgs {
    fn config(&self) -> Config {
        Config {
            address: SocketAddr::new(self.address, self.port),
            tls: self.tls || self.token.is_some(),
            token: self.token.clone(),
            faults: self.faults.clone(),
            fault_seed: self.fault_seed,
            fault_timeout: self.fault_timeout,
            watch_close_max: self.watch_close_max,
            history_limit: self.history,
            write_latency: self.write_latency,
            header_read_timeout: self.header_read_timeout,
            max_connections: self
                .max_connections
                .unwrap_or_else(|| Config::default().max_connections),
            audit_log: self.audit_log.clone(),
            ..Config::default()
        }
    }
}

/// Objects from files and folders, CustomResourceDefinitions and Namespaces first.
pub(super) fn objects_to_load(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut objects = super::read_objects(paths)?;
    let rank = |o: &Value| match o.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    };
    objects.sort_by_key(rank);
    Ok(objects)
}

pub(super) fn run(args: ApiServerArgs) -> anyhow::Result<ExitCode> {
    let objects = objects_to_load(&args.load)?;
    let runtime = super::runtime(None)?;
    let snapshot = match &args.state {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let value: Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a kstage API server state", path.display()))?;
            Some(value)
        }
        _ => None,
    };
    runtime.block_on(async {
        let server = ApiServer::start_with(args.config(), snapshot.as_ref())
            .await
            .with_context(|| match &args.state {
                Some(path) if snapshot.is_some() => format!(
                    "cannot serve {} on {}:{}",
                    path.display(),
                    args.address,
                    args.port
                ),
                _ => format!("cannot listen on {}:{}", args.address, args.port),
            })?;
        if snapshot.is_some() {
            eprintln!(
                "kstage apiserver: {} objects restored at resourceVersion {}",
                server.server().state.len(),
                server.server().state.resource_version()
            );
        }
        for object in objects {
            let name = crate::cluster::ObjectKey::of(&object)
                .map_or_else(|| "an object without a name".to_owned(), |k| k.to_string());
            server
                .server()
                .state
                .create(object)
                .with_context(|| format!("cannot load {name}"))?;
        }
        server
            .write_kubeconfig(&args.kubeconfig)
            .with_context(|| format!("cannot write {}", args.kubeconfig.display()))?;
        eprintln!(
            "kstage apiserver: serving {} (Kubernetes {})\n  kubeconfig: {}\n  try: kubectl --kubeconfig {} get nodes,pods -A",
            server.url(),
            crate::apiserver::KUBERNETES_VERSION,
            args.kubeconfig.display(),
            args.kubeconfig.display()
        );
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = terminate.recv() => {}
        }
        if let Some(path) = &args.state {
            // Writes stop before the state is taken: every write a client was told
            // succeeded is in the file; later ones get 503 and are retried on the
            // restarted server.
            let snapshot = server.close();
            save_state(&snapshot, path)?;
            eprintln!(
                "kstage apiserver: state saved to {} ({} objects, resourceVersion {})",
                path.display(),
                server.server().state.len(),
                server.server().state.resource_version()
            );
        }
        eprintln!("kstage apiserver: stopped");
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// Write `snapshot` to `path` whole or not at all (a new file, then renamed).
fn save_state(snapshot: &Value, path: &std::path::Path) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_vec(snapshot)?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ApiServerArgs,
    }

    #[test]
    fn a_token_implies_tls() {
        let config = |argv: &[&str]| Cli::parse_from(argv).args.config();
        assert!(!config(&["x"]).tls);
        assert!(config(&["x", "--tls"]).tls);
        let with_token = config(&["x", "--token", "t"]);
        assert!(with_token.tls && with_token.token.as_deref() == Some("t"));
    }
}
