//! Watch streams: `GET ...?watch=1` answers with a chunked stream of JSON lines
//! (`{"type":"ADDED","object":{...}}`), from a resourceVersion or from now (the current
//! objects first, as `ADDED`), with bookmarks when asked, `sendInitialEvents`, label and
//! field selectors (an object that starts matching is `ADDED`, one that stops is
//! `DELETED`), a timeout, and `ERROR` 410 Expired when the history no longer reaches
//! back to the requested resourceVersion.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::reply::{self, Body};
use super::request::Query;
use super::resources::Resource;
use super::select::Filter;
use super::state::{EventType, Record, WatchStart};
use super::{Server, table};

/// A watch without `timeoutSeconds` ends after this long (clients re-watch).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Options {
    namespace: Option<String>,
    filter: Filter,
    bookmarks: bool,
    initial_events_end: bool,
    table: bool,
    deadline: Instant,
    close_at: Option<Instant>,
}

/// Answer a watch request.
pub fn start(
    server: Arc<Server>,
    resource: Arc<Resource>,
    namespace: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
    close_after: Option<Duration>,
) -> Response<Body> {
    let filter = match Filter::parse(&resource, query) {
        Ok(f) => f,
        Err(e) => return reply::error(400, &e.0, None),
    };
    let send_initial = query.flag("sendInitialEvents");
    let from = match query.resource_version() {
        _ if send_initial => None,
        Ok(from) => from,
        Err(m) => return reply::storage_error(&m),
    };
    // As kube-apiserver: no timeout, or zero, is the server's own.
    let timeout = match query.int("timeoutSeconds") {
        Ok(t) => match t.and_then(|t| u64::try_from(t).ok()).filter(|&t| t > 0) {
            Some(t) => Duration::from_secs(t),
            None => DEFAULT_TIMEOUT,
        },
        Err(m) => return reply::bad_parameter(&m),
    };
    let now = Instant::now();
    let namespace = filter.namespace(namespace).map(str::to_owned);
    let options = Options {
        namespace,
        bookmarks: query.flag("allowWatchBookmarks"),
        initial_events_end: send_initial,
        table: super::table::wants_table(headers),
        deadline: now + timeout,
        close_at: close_after.map(|d| now + d),
        filter,
    };
    let (tx, rx) = mpsc::channel(256);
    let started = server
        .state
        .watch(&resource, options.namespace.as_deref(), from);
    match started {
        Ok(start) => {
            tokio::spawn(run(server, resource, start, options, tx));
        }
        Err(expired) => {
            server
                .expired_watches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let line = expired_line(from.unwrap_or(0), expired.oldest);
            // The channel is new and has room.
            let _ = tx.try_send(line);
        }
    }
    reply::stream(rx)
}

fn expired_line(requested: u64, oldest: u64) -> Bytes {
    let status = reply::status_body(
        410,
        "Expired",
        &format!("too old resource version: {requested} ({oldest})"),
        None,
    );
    line("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

fn line(event: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

impl Options {
    fn matches(&self, object: &Value) -> bool {
        let in_namespace = self.namespace.as_deref().is_none_or(|ns| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == Some(ns)
        });
        in_namespace && self.filter.matches(object)
    }

    /// The event a record is for this watcher, if any.
    fn event(&self, record: &Record) -> Option<EventType> {
        let now = self.matches(&record.object);
        let before = record.prev.as_deref().is_some_and(|p| self.matches(p));
        match (record.event, before, now) {
            (EventType::Deleted, b, n) if b || n => Some(EventType::Deleted),
            (EventType::Deleted, ..) => None,
            (_, true, true) => Some(EventType::Modified),
            (_, false, true) => Some(EventType::Added),
            (_, true, false) => Some(EventType::Deleted),
            (_, false, false) => None,
        }
    }
}

async fn run(
    server: Arc<Server>,
    resource: Arc<Resource>,
    start: WatchStart,
    options: Options,
    tx: mpsc::Sender<Bytes>,
) {
    let object_line = |event: EventType, object: &Value, json: Option<&Bytes>| {
        if options.table {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let t = table::table(&resource, &[object], rv, server.clock.now());
            return line(event.as_str(), &serde_json::to_vec(&t).unwrap_or_default());
        }
        match json {
            Some(j) => line(event.as_str(), j),
            None => line(
                event.as_str(),
                &serde_json::to_vec(object).unwrap_or_default(),
            ),
        }
    };
    let bookmark = |rv: u64, end: bool| {
        let mut object = json!({
            "kind": resource.kind,
            "apiVersion": resource.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
        });
        if end {
            object["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line("BOOKMARK", &serde_json::to_vec(&object).unwrap_or_default())
    };
    let mut cursor = start.from;
    let mut latest = start.channel.subscribe();
    for object in &start.initial {
        if options.matches(object)
            && tx
                .send(object_line(EventType::Added, object, None))
                .await
                .is_err()
        {
            return;
        }
    }
    if options.initial_events_end && tx.send(bookmark(cursor, true)).await.is_err() {
        return;
    }
    let far = options.deadline + Duration::from_secs(3600);
    let every = server.config.bookmark_every;
    let mut next_bookmark = Instant::now() + every;
    loop {
        latest.borrow_and_update();
        match start.channel.after(cursor) {
            Err(expired) => {
                server
                    .expired_watches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = tx.send(expired_line(cursor, expired.oldest)).await;
                return;
            }
            Ok(records) => {
                for record in records {
                    cursor = record.rv;
                    let Some(event) = options.event(&record) else {
                        continue;
                    };
                    let json = (!options.table).then(|| record.object_json());
                    if tx
                        .send(object_line(event, &record.object, json))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        tokio::select! {
            changed = latest.changed() => if changed.is_err() { return },
            () = sleep_until(options.deadline) => return,
            () = sleep_until(options.close_at.unwrap_or(far)) => return,
            () = sleep_until(next_bookmark) => {
                next_bookmark = Instant::now() + every;
                if options.bookmarks && tx.send(bookmark(cursor, false)).await.is_err() {
                    return;
                }
            }
            () = tx.closed() => return,
        }
    }
}
