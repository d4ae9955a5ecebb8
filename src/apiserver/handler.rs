//! One request: authentication, routing, fault injection, then the verb (get, list,
//! watch, create, update, patch, apply, delete, deletecollection) against [`State`].
//!
//! Helpers return `Err(response)` to answer early with an error; a response is built
//! once per request, so its size in the `Result` does not matter.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};

use super::reply::{self, Body};
use super::request::Verb;
use super::request::{Query, Route, Target};
use super::resources::Resource;
use super::select::Filter;
use super::state::State;
use super::table::wants_table;
use super::{Server, audit, protobuf, table, watch};
use crate::cluster::faults::Fault;
use crate::cluster::{ApiError, ObjectKey};
use crate::patch::PatchType;

/// The largest request body accepted (as a real API server: 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// How a request ends without a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Abort {
    /// Reset the connection (RST).
    #[error("connection reset (injected)")]
    Reset,
    /// Close the connection (FIN) without answering.
    #[error("connection closed (injected)")]
    Eof,
}

/// Serve one request, and write its audit event when the server keeps an audit log.
pub async fn handle<B>(server: Arc<Server>, req: Request<B>) -> Result<Response<Body>, Abort>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Some(log) = server.audit.as_ref() else {
        return answer(server, req).await;
    };
    let route = Route::parse(req.uri().path());
    let object = match route {
        Route::Resource(target) => {
            let query = Query::parse(req.uri().query());
            verb_of(req.method(), &target, &query, req.headers()).map(|verb| (verb, target))
        }
        _ => None,
    };
    let authenticated = server
        .config
        .token
        .as_ref()
        .is_some_and(|token| authorized(req.headers(), token));
    let request = audit::Request {
        received: server.clock.now(),
        uri: req.uri().to_string(),
        user_agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        user: if authenticated {
            audit::TOKEN_USER
        } else {
            audit::ANONYMOUS
        },
        object,
        method: req.method().clone(),
    };
    let log = log.clone();
    let response = answer(server.clone(), req).await?;
    log.record(&request, response.status().as_u16(), server.clock.now());
    Ok(response)
}

/// Serve one request.
async fn answer<B>(server: Arc<Server>, req: Request<B>) -> Result<Response<Body>, Abort>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if let Some(token) = &server.config.token
        && !authorized(req.headers(), token)
    {
        return Ok(reply::error(401, "Unauthorized", None));
    }
    let route = Route::parse(req.uri().path());
    let query = Query::parse(req.uri().query());
    let state = &server.state;
    Ok(match route {
        Route::Version => reply::json(StatusCode::OK, &version()),
        Route::Health => {
            let mut r = reply::json_bytes(StatusCode::OK, b"ok".to_vec());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            r
        }
        Route::CoreVersions => reply::json(
            StatusCode::OK,
            &state.registry().core_versions(&server.address),
        ),
        Route::Groups => reply::json(StatusCode::OK, &state.registry().groups()),
        Route::Group(g) => match state.registry().group(&g) {
            Some(doc) => reply::json(StatusCode::OK, &doc),
            None => reply::not_found(),
        },
        Route::Resources { group, version } => {
            match state.registry().resource_list(&group, &version) {
                Some(doc) => reply::json(StatusCode::OK, &doc),
                None => reply::not_found(),
            }
        }
        Route::Faults => faults(&server, req).await,
        Route::OpenApiRoot => reply::json(StatusCode::OK, &state.registry().openapi_root()),
        Route::OpenApi { group, version } => {
            match state.registry().openapi_group_version(&group, &version) {
                Some(doc) => reply::json(StatusCode::OK, &doc),
                None => reply::not_found(),
            }
        }
        Route::NotFound => reply::not_found(),
        Route::Resource(target) => return resource(server.clone(), req, target, query).await,
    })
}

fn authorized(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == token)
}

/// The Kubernetes version the server reports.
fn version() -> Value {
    let minor = super::KUBERNETES_VERSION
        .trim_start_matches("v1.")
        .split('.')
        .next()
        .unwrap_or("36");
    json!({
        "major": "1",
        "minor": minor,
        "emulationMajor": "1",
        "emulationMinor": minor,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": minor.parse::<u32>().map_or_else(|_| minor.to_owned(), |m| m.saturating_sub(1).to_string()),
        "gitVersion": format!("{}+kstage", super::KUBERNETES_VERSION),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// The body of a request, at most [`MAX_BODY`] bytes. A larger one is answered with
/// kube-apiserver's 413 and `Connection: close`, before it is read when its
/// `Content-Length` says so; the connection then ends with a lingering close (see
/// `serve_connection`), so the client reads the 413 instead of a broken pipe.
async fn read_body<B>(req: Request<B>) -> Result<Bytes, Response<Body>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(reply::error(
            400,
            &format!("the request body could not be read: {e}"),
            None,
        )),
    }
}

/// kube-apiserver's answer to a body over the limit; the connection closes after it (the
/// rest of the body is not read).
fn too_large() -> Response<Body> {
    let mut response = reply::error(
        413,
        &format!("Request entity too large: limit is {MAX_BODY}"),
        None,
    );
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

/// `GET /kstage/faults`: the rules and counters; `PUT` with a spec (text, or JSON
/// `{"spec": "..."}`) replaces the rules.
async fn faults<B>(server: &Server, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let faults = &server.faults;
    match *req.method() {
        Method::GET => {}
        Method::PUT | Method::POST => {
            let body = match read_body(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let text = String::from_utf8_lossy(&body);
            let spec = match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => m
                    .get("spec")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                _ => text.trim().to_owned(),
            };
            match spec.parse() {
                Ok(spec) => faults.set_spec(spec),
                Err(e) => return reply::error(400, &e.to_string(), None),
            }
        }
        _ => return reply::error(405, "use GET or PUT", None),
    }
    let injected: Vec<Value> = faults
        .injected_by_resource()
        .into_iter()
        .map(|(k, n)| json!({"verb": k.verb.as_str(), "resource": k.resource, "fault": k.fault.to_string(), "count": n}))
        .collect();
    let requests: serde_json::Map<String, Value> = faults
        .requests()
        .into_iter()
        .map(|(v, n)| (v.as_str().to_owned(), json!(n)))
        .collect();
    reply::json(
        StatusCode::OK,
        &json!({"spec": faults.spec().to_string(), "requests": requests, "injected": injected}),
    )
}

/// What a resource request does.
fn verb_of(method: &Method, target: &Target, query: &Query, headers: &HeaderMap) -> Option<Verb> {
    let named = target.name.is_some();
    Some(match (method, named) {
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) if query.flag("watch") => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, false) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => {
            let apply = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(PatchType::from_content_type)
                == Some(PatchType::Apply);
            if apply { Verb::Apply } else { Verb::Patch }
        }
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        _ => return None,
    })
}

async fn resource<B>(
    server: Arc<Server>,
    req: Request<B>,
    target: Target,
    query: Query,
) -> Result<Response<Body>, Abort>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Some(resource) =
        server
            .state
            .registry()
            .get(&target.group, &target.version, &target.plural)
    else {
        return Ok(reply::not_found());
    };
    if target.namespace.is_some() && !resource.namespaced {
        return Ok(reply::not_found());
    }
    if resource.review {
        return Ok(review(&server, req, &resource, &target).await);
    }
    let subresource = target.subresource.as_deref();
    if subresource
        .is_some_and(|s| !(s == "status" && resource.status || s == "scale" && resource.scales()))
    {
        return Ok(reply::not_found());
    }
    let Some(verb) = verb_of(req.method(), &target, &query, req.headers()) else {
        return Ok(reply::error(
            405,
            "the server does not allow this method on the requested resource",
            None,
        ));
    };
    if query.get("dryRun").is_some() {
        return Ok(reply::error(
            400,
            "dryRun is not supported by the embedded API server",
            None,
        ));
    }
    let close_after = match injected_fault(&server, verb, &resource).await {
        Ok(close_after) => close_after,
        Err(answer) => return answer,
    };
    if verb.writes() && !server.config.write_latency.is_zero() {
        tokio::time::sleep(server.config.write_latency).await;
    }
    let namespace = target.namespace.as_deref();
    let r = &resource;
    Ok(match verb {
        _ if subresource == Some("scale") => {
            with_body(&server, r, &target, &query, verb, req).await
        }
        Verb::Get => get(&server.state, r, &target, req.headers(), &server),
        Verb::List => list(&server, r, namespace, &query, req.headers()),
        Verb::Watch => watch::start(
            server.clone(),
            resource.clone(),
            namespace,
            &query,
            req.headers(),
            close_after,
        ),
        _ => with_body(&server, r, &target, &query, verb, req).await,
    })
}

/// A request that carries a body: a write, a delete (its `DeleteOptions`), or any
/// request to the `scale` subresource.
async fn with_body<B>(
    server: &Server,
    r: &Resource,
    target: &Target,
    query: &Query,
    verb: Verb,
    req: Request<B>,
) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let content_type = content_type(&req);
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let namespace = target.namespace.as_deref();
    let state = &server.state;
    if target.subresource.as_deref() == Some("scale") {
        return scale_request(state, r, target, verb, &content_type, &body);
    }
    match verb {
        Verb::Create => create(state, r, namespace, &content_type, &body),
        Verb::Update => update(state, r, target, &content_type, &body),
        Verb::Patch | Verb::Apply => patch(state, r, target, query, &content_type, &body),
        Verb::Delete => delete(
            state,
            r,
            target,
            query,
            &delete_options(&content_type, &body),
        ),
        _ => delete_collection(
            server,
            r,
            namespace,
            query,
            &delete_options(&content_type, &body),
        ),
    }
}

/// Draw a fault for the request: `Err` with what the request ends with, or `Ok` with when a
/// watch drawn for `close` ends (`None`: no fault, or one that does not end it).
async fn injected_fault(
    server: &Server,
    verb: Verb,
    resource: &Resource,
) -> Result<Option<Duration>, Result<Response<Body>, Abort>> {
    let Some(fault) = server.faults.draw_for(verb.fault_verb(), &resource.plural) else {
        return Ok(None);
    };
    match fault {
        Fault::Refused | Fault::Reset => Err(Err(Abort::Reset)),
        Fault::Eof => Err(Err(Abort::Eof)),
        Fault::Timeout => {
            tokio::time::sleep(server.config.fault_timeout).await;
            Err(Ok(reply::error(
                504,
                "Timeout: request did not complete within the allowed duration (injected)",
                None,
            )))
        }
        Fault::Status { code, retry_after } => Err(Ok(injected_status(code, retry_after))),
        Fault::Close => {
            let max = server.config.watch_close_max.as_secs_f64();
            Ok(Some(Duration::from_secs_f64(server.faults.unit() * max)))
        }
    }
}

fn injected_status(code: u16, retry_after: Option<Duration>) -> Response<Body> {
    let details = retry_after.map(|d| json!({"retryAfterSeconds": d.as_secs_f64().ceil() as u64}));
    let message = match code {
        429 => "Too many requests, please try again later. (injected)".to_owned(),
        409 => "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected)".to_owned(),
        _ => format!("{} (injected)", crate::cluster::status_reason(code)),
    };
    let mut response = reply::error(code, &message, details);
    if let Some(d) = retry_after {
        let secs = (d.as_secs_f64().ceil() as u64).max(1);
        if let Ok(v) = http::HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

fn key_of(resource: &Resource, namespace: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey {
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        namespace: if resource.namespaced {
            namespace.unwrap_or("").to_owned()
        } else {
            String::new()
        },
        name: name.to_owned(),
    }
}

fn get(
    state: &State,
    resource: &Resource,
    target: &Target,
    headers: &HeaderMap,
    server: &Server,
) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or("");
    let key = key_of(resource, target.namespace.as_deref(), name);
    match state.get(&key) {
        Ok(object) if wants_table(headers) => {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            reply::json(
                StatusCode::OK,
                &table::table(resource, &[&object], &rv, server.clock.now()),
            )
        }
        Ok(object) => reply::json(StatusCode::OK, &object),
        Err(e) => reply::api_error(resource, name, &e),
    }
}

/// A `continue` token: where the next page starts.
#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

fn list(
    server: &Server,
    resource: &Resource,
    namespace: Option<&str>,
    query: &Query,
    headers: &HeaderMap,
) -> Response<Body> {
    let filter = match Filter::parse(resource, query) {
        Ok(f) => f,
        Err(e) => return reply::error(400, &e.0, None),
    };
    // As kube-apiserver: parameters that must be numbers are checked even where they
    // change nothing here (a list's `timeoutSeconds`, its `resourceVersion`).
    let limit = match query.int("limit") {
        Ok(l) => l.map_or(0, |n| usize::try_from(n).unwrap_or(0)),
        Err(m) => return reply::bad_parameter(&m),
    };
    if let Err(m) = query.int("timeoutSeconds") {
        return reply::bad_parameter(&m);
    }
    if let Err(m) = query.resource_version() {
        return reply::storage_error(&m);
    }
    let (after, at) = match query.get("continue") {
        None => (None, None),
        Some(token) => match decode_continue(token) {
            Some(c) => (Some(key_of(resource, Some(&c.ns), &c.name)), Some(c.rv)),
            None => return reply::error(400, "invalid continue token", None),
        },
    };
    let namespace = filter.namespace(namespace);
    let listed = match (filter.fields.pinned("metadata.name"), namespace) {
        // One object by name: no scan.
        (Some(name), ns) if after.is_none() && (ns.is_some() || !resource.namespaced) => {
            let key = key_of(resource, ns, name);
            let items: Vec<_> = server
                .state
                .get(&key)
                .ok()
                .filter(|o| filter.matches(o))
                .into_iter()
                .collect();
            super::state::Listed {
                items,
                rv: server.state.resource_version(),
                more_after: None,
            }
        }
        _ => match server
            .state
            .list(resource, namespace, after.as_ref(), limit, at, |o| {
                filter.matches(o)
            }) {
            Ok(listed) => listed,
            Err(expired) => {
                return reply::error(
                    410,
                    &format!(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter (the oldest version kept is {}).",
                        expired.oldest
                    ),
                    None,
                );
            }
        },
    };
    let rv = listed.rv.to_string();
    if wants_table(headers) {
        let objects: Vec<&Value> = listed.items.iter().map(|o| &**o).collect();
        let mut t = table::table(resource, &objects, &rv, server.clock.now());
        if let Some(after) = &listed.more_after {
            t["metadata"]["continue"] = json!(encode_continue(listed.rv, after));
        }
        return reply::json(StatusCode::OK, &t);
    }
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(after) = &listed.more_after {
        metadata["continue"] = json!(encode_continue(listed.rv, after));
    }
    reply::json_bytes(
        StatusCode::OK,
        list_json(resource, &metadata, &listed.items),
    )
}

/// A `<Kind>List` of `items`, written piece by piece: the items are not copied into one
/// big value.
fn list_json(resource: &Resource, metadata: &Value, items: &[Arc<Value>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + items.len() * 1024);
    out.extend_from_slice(b"{\"kind\":");
    let _ = serde_json::to_writer(&mut out, &format!("{}List", resource.kind));
    out.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut out, &resource.api_version());
    out.extend_from_slice(b",\"metadata\":");
    let _ = serde_json::to_writer(&mut out, metadata);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_list_item(&mut out, item);
    }
    out.extend_from_slice(b"]}");
    out
}

/// One item of a list as kube-apiserver writes it: without `apiVersion` and `kind` (the
/// list carries them once; only watch events' objects have their own). Clients that take
/// an item's kind from the item itself break against a real server, so they break here too.
fn write_list_item(out: &mut Vec<u8>, item: &Value) {
    let Value::Object(fields) = item else {
        let _ = serde_json::to_writer(&mut *out, item);
        return;
    };
    out.push(b'{');
    let mut first = true;
    for (key, value) in fields {
        if key == "apiVersion" || key == "kind" {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, value);
    }
    out.push(b'}');
}

fn encode_continue(rv: u64, after: &ObjectKey) -> String {
    let c = Continue {
        rv,
        ns: after.namespace.clone(),
        name: after.name.clone(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&c).unwrap_or_default())
}

fn decode_continue(token: &str) -> Option<Continue> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How a body that holds an object is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    /// YAML, which takes JSON too.
    Yaml,
    /// `application/vnd.kubernetes.protobuf` (see [`protobuf`]).
    Protobuf,
}

impl Encoding {
    /// A create or update body's encoding, by its `Content-Type`: JSON, YAML, or protobuf
    /// for the kinds [`protobuf`] decodes, as kube-apiserver takes them; any other type,
    /// or none, is its 415.
    fn of_object(content_type: &str, resource: &Resource) -> Result<Self, Response<Body>> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/json") {
            Ok(Self::Json)
        } else if media.eq_ignore_ascii_case("application/yaml") {
            Ok(Self::Yaml)
        } else if media.eq_ignore_ascii_case(protobuf::MEDIA_TYPE)
            && protobuf::decodes(&resource.api_version(), &resource.kind)
        {
            Ok(Self::Protobuf)
        } else {
            Err(unsupported_body(resource))
        }
    }
}

/// kube-apiserver's 415 for a body in a format the resource does not take.
fn unsupported_body(resource: &Resource) -> Response<Body> {
    let accepted = if protobuf::decodes(&resource.api_version(), &resource.kind) {
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    } else {
        "application/json, application/yaml"
    };
    reply::error(
        415,
        &format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted}"
        ),
        None,
    )
}

/// Decode a body that must hold one object; `Err` is why it does not, in the words of
/// kube-apiserver's decoders (JSON: the whole body is one value, nothing after it).
fn object_body(body: &[u8], encoding: Encoding) -> Result<Value, String> {
    let value = match encoding {
        Encoding::Json => serde_json::from_slice::<Value>(body)
            .map_err(|e| format!("couldn't get version/kind; json parse error: {e}"))?,
        Encoding::Protobuf => protobuf::decode(body).map_err(|e| e.to_string())?,
        Encoding::Yaml => std::str::from_utf8(body)
            .map_err(|e| format!("the body is not UTF-8 text: {e}"))
            .and_then(|text| {
                crate::yaml::to_json(text)
                    .map_err(|e| format!("error converting YAML to JSON: {e}"))
            })?,
    };
    match value {
        Value::Object(_) => Ok(value),
        _ => Err("couldn't get version/kind; the body is not an object".to_owned()),
    }
}

/// The object of a create or update body, filled in and checked by [`conform`].
fn conformed(
    resource: &Resource,
    target: (Option<&str>, Option<&str>),
    content_type: &str,
    body: &[u8],
) -> Result<Value, Response<Body>> {
    let encoding = Encoding::of_object(content_type, resource)?;
    if encoding == Encoding::Protobuf
        && let Ok(envelope) = protobuf::envelope(body)
        && !protobuf::decodes(&envelope.api_version, &envelope.kind)
    {
        return Err(unsupported_body(resource));
    }
    let mut object = object_body(body, encoding).map_err(|cause| {
        reply::error(
            400,
            &format!(
                "the object provided is unrecognized (must be of type {}): {cause}",
                resource.kind
            ),
            None,
        )
    })?;
    conform(resource, target.0, target.1, &mut object)?;
    default_fields(resource, &mut object);
    Ok(object)
}

/// kube-apiserver's defaults that clients read back: a Secret without a `type` is
/// `Opaque` (`kubectl create secret generic` sends none).
fn default_fields(resource: &Resource, object: &mut Value) {
    if resource.builtin
        && resource.kind == "Secret"
        && let Some(map) = object.as_object_mut()
        && map
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        map.insert("type".into(), json!("Opaque"));
    }
}

/// The object of a server-side apply body (YAML, or JSON as YAML), which must name its
/// `apiVersion` and `kind`.
fn applied(
    resource: &Resource,
    target: (Option<&str>, Option<&str>),
    body: &[u8],
) -> Result<Value, Response<Body>> {
    let mut object = object_body(body, Encoding::Yaml)
        .map_err(|cause| reply::error(400, &format!("error decoding YAML: {cause}"), None))?;
    if object.get("apiVersion").is_none() || object.get("kind").is_none() {
        return Err(reply::error(
            400,
            "apiVersion and kind must be set in an applied object",
            None,
        ));
    }
    conform(resource, target.0, target.1, &mut object)?;
    Ok(object)
}

/// Fill in or check what the path says of an object: apiVersion, kind, namespace, name.
fn conform(
    resource: &Resource,
    namespace: Option<&str>,
    name: Option<&str>,
    object: &mut Value,
) -> Result<(), Response<Body>> {
    let api_version = resource.api_version();
    let Some(map) = object.as_object_mut() else {
        return Err(reply::error(400, "the body must be a JSON object", None));
    };
    for (field, wanted) in [
        ("apiVersion", api_version.as_str()),
        ("kind", resource.kind.as_str()),
    ] {
        match map.get(field).and_then(Value::as_str) {
            None | Some("") => {
                map.insert(field.into(), json!(wanted));
            }
            Some(v) if v == wanted => {}
            Some(v) => {
                return Err(reply::error(
                    400,
                    &format!("{field} {v:?} does not match the request path ({wanted:?})"),
                    None,
                ));
            }
        }
    }
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err(reply::error(400, "metadata must be an object", None));
    };
    if resource.namespaced
        && let Some(ns) = namespace
    {
        fill_or_check(
            meta,
            "namespace",
            ns,
            "the namespace of the provided object does not match the namespace sent on the request",
        )?;
    }
    if let Some(name) = name {
        fill_or_check(
            meta,
            "name",
            name,
            "the name of the object does not match the name on the URL",
        )?;
    }
    Ok(())
}

/// Set `field` of `meta` to what the path says, or refuse a different value.
fn fill_or_check(
    meta: &mut serde_json::Map<String, Value>,
    field: &str,
    wanted: &str,
    mismatch: &str,
) -> Result<(), Response<Body>> {
    match meta.get(field).and_then(Value::as_str) {
        None | Some("") => {
            meta.insert(field.into(), json!(wanted));
            Ok(())
        }
        Some(v) if v == wanted => Ok(()),
        Some(_) => Err(reply::error(400, mismatch, None)),
    }
}

fn name_in(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn create(
    state: &State,
    resource: &Resource,
    namespace: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    if resource.namespaced && namespace.is_none() {
        return reply::not_found();
    }
    let object = match conformed(resource, (namespace, None), content_type, body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let name = name_in(&object).to_owned();
    match state.create(object) {
        Ok(created) => reply::json(StatusCode::CREATED, &created),
        Err(ApiError::NotFound(_)) => reply::error(
            404,
            &format!("namespaces {:?} not found", namespace.unwrap_or("")),
            Some(json!({"name": namespace.unwrap_or(""), "kind": "namespaces"})),
        ),
        Err(e) => reply::api_error(resource, &name, &e),
    }
}

fn update(
    state: &State,
    resource: &Resource,
    target: &Target,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or("");
    let object = match conformed(
        resource,
        (target.namespace.as_deref(), Some(name)),
        content_type,
        body,
    ) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let key = key_of(resource, target.namespace.as_deref(), name);
    match state.update(&key, object, target.subresource.as_deref()) {
        Ok(o) => reply::json(StatusCode::OK, &o),
        Err(e) => reply::api_error(resource, name, &e),
    }
}

fn patch(
    state: &State,
    resource: &Resource,
    target: &Target,
    query: &Query,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or("");
    let unsupported = || {
        reply::api_error(
            resource,
            name,
            &ApiError::UnsupportedMediaType(content_type.to_owned()),
        )
    };
    let Some(patch_type) = PatchType::from_content_type(content_type) else {
        return unsupported();
    };
    if patch_type == PatchType::Strategic && !resource.builtin {
        return unsupported();
    }
    let subresource = target.subresource.as_deref();
    let key = key_of(resource, target.namespace.as_deref(), name);
    if patch_type == PatchType::Apply {
        if query.get("fieldManager").is_none() {
            return reply::error(
                422,
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                Some(json!({
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [{
                        "field": "fieldManager",
                        "message": "Required value: is required for apply patch",
                        "reason": "FieldValueRequired",
                    }],
                })),
            );
        }
        let object = match applied(resource, (target.namespace.as_deref(), Some(name)), body) {
            Ok(o) => o,
            Err(r) => return r,
        };
        // Custom resources merge; built-in kinds merge lists by their keys.
        let as_type = if resource.builtin {
            PatchType::Apply
        } else {
            PatchType::Merge
        };
        return match state.apply(object, as_type, subresource) {
            Ok((o, true)) => reply::json(StatusCode::CREATED, &o),
            Ok((o, false)) => reply::json(StatusCode::OK, &o),
            Err(e) => reply::api_error(resource, name, &e),
        };
    }
    let data: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return reply::error(400, &format!("the patch could not be decoded: {e}"), None),
    };
    match (patch_type, &data) {
        (PatchType::Json, Value::Array(_)) => {}
        (PatchType::Json, _) => {
            return reply::error(400, "a JSON patch must be a list of operations", None);
        }
        (_, Value::Object(_)) => {}
        _ => return reply::error(400, "a merge patch must be a JSON object", None),
    }
    match state.patch(&key, patch_type, subresource, data) {
        Ok(saved) => reply::json_bytes(StatusCode::OK, saved.json()),
        Err(e) => reply::api_error(resource, name, &e),
    }
}

/// The grace period of a delete: the query's (a 400 when it is not a number), else the
/// body's `DeleteOptions`.
fn grace_period(query: &Query, options: &Value) -> Result<Option<i64>, Response<Body>> {
    Ok(query
        .int("gracePeriodSeconds")
        .map_err(|m| reply::bad_parameter(&m))?
        .or_else(|| options.get("gracePeriodSeconds").and_then(Value::as_i64)))
}

fn delete(
    state: &State,
    resource: &Resource,
    target: &Target,
    query: &Query,
    options: &Value,
) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or("");
    let key = key_of(resource, target.namespace.as_deref(), name);
    if let Some(pre) = options.get("preconditions").filter(|p| p.is_object()) {
        let current = match state.get(&key) {
            Ok(o) => o,
            Err(e) => return reply::api_error(resource, name, &e),
        };
        for (field, pointer) in [
            ("uid", "/metadata/uid"),
            ("resourceVersion", "/metadata/resourceVersion"),
        ] {
            if let Some(wanted) = pre.get(field).and_then(Value::as_str)
                && current.pointer(pointer).and_then(Value::as_str) != Some(wanted)
            {
                return reply::api_error(resource, name, &ApiError::Conflict(key.to_string()));
            }
        }
    }
    let grace = match grace_period(query, options) {
        Ok(g) => g,
        Err(r) => return r,
    };
    match state.delete(&key, grace) {
        // Pods answer with the deleted object, other kinds with a Status (as a real
        // server does).
        Ok((o, true)) if resource.kind != "Pod" || !resource.builtin => reply::json(
            StatusCode::OK,
            &json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": resource.group, "kind": resource.plural, "uid": o.pointer("/metadata/uid")},
            }),
        ),
        Ok((o, _)) => reply::json(StatusCode::OK, &o),
        Err(e) => reply::api_error(resource, name, &e),
    }
}

fn delete_collection(
    server: &Server,
    resource: &Resource,
    namespace: Option<&str>,
    query: &Query,
    options: &Value,
) -> Response<Body> {
    let filter = match Filter::parse(resource, query) {
        Ok(f) => f,
        Err(e) => return reply::error(400, &e.0, None),
    };
    let grace = match grace_period(query, options) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let listed = server
        .state
        .list(resource, filter.namespace(namespace), None, 0, None, |o| {
            filter.matches(o)
        })
        .map(|l| l.items)
        .unwrap_or_default();
    let mut items = Vec::new();
    for object in listed {
        let Some(key) = ObjectKey::of(&object) else {
            continue;
        };
        if let Ok((o, _)) = server.state.delete(&key, grace) {
            items.push(o);
        }
    }
    let metadata = json!({"resourceVersion": server.state.resource_version().to_string()});
    reply::json_bytes(StatusCode::OK, list_json(resource, &metadata, &items))
}

/// The `DeleteOptions` of a delete's body (JSON, or protobuf from typed clients); `null`
/// when there are none or they cannot be read.
fn delete_options(content_type: &str, body: &[u8]) -> Value {
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case(protobuf::MEDIA_TYPE) {
        return protobuf::decode(body).unwrap_or(Value::Null);
    }
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// A request to a review (see [`review`](super::review)): create only.
async fn review<B>(
    server: &Server,
    req: Request<B>,
    resource: &Resource,
    target: &Target,
) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if req.method() != Method::POST || target.name.is_some() || target.namespace.is_some() {
        return reply::error(
            405,
            "the server does not allow this method on the requested resource",
            None,
        );
    }
    let content_type = content_type(&req);
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let object = match conformed(resource, (None, None), &content_type, &body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    // A server with a token has checked it by now; one without takes everyone.
    let user = match server.config.token {
        Some(_) => super::review::User {
            name: audit::TOKEN_USER,
            authenticated: true,
        },
        None => super::review::User {
            name: audit::ANONYMOUS,
            authenticated: false,
        },
    };
    super::review::answer(resource, object, user)
}

/// A request to a Deployment's `scale` subresource (see [`scale`](super::scale)).
fn scale_request(
    state: &State,
    resource: &Resource,
    target: &Target,
    verb: Verb,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    let key = key_of(
        resource,
        target.namespace.as_deref(),
        target.name.as_deref().unwrap_or(""),
    );
    match verb {
        Verb::Get => super::scale::get(state, resource, &key),
        Verb::Update => {
            let media = content_type.split(';').next().unwrap_or("").trim();
            let encoding = if media.eq_ignore_ascii_case(protobuf::MEDIA_TYPE) {
                Encoding::Protobuf
            } else if media.eq_ignore_ascii_case("application/yaml") {
                Encoding::Yaml
            } else {
                Encoding::Json
            };
            match object_body(body, encoding) {
                Ok(scale) => super::scale::update(state, resource, &key, &scale),
                Err(cause) => reply::error(
                    400,
                    &format!(
                        "the object provided is unrecognized (must be of type Scale): {cause}"
                    ),
                    None,
                ),
            }
        }
        Verb::Patch => {
            let patch_type = PatchType::from_content_type(content_type);
            match (patch_type, serde_json::from_slice::<Value>(body)) {
                (Some(t), Ok(data)) => super::scale::patch(state, resource, &key, t, &data),
                (None, _) => reply::api_error(
                    resource,
                    &key.name,
                    &ApiError::UnsupportedMediaType(content_type.to_owned()),
                ),
                (_, Err(e)) => {
                    reply::error(400, &format!("the patch could not be decoded: {e}"), None)
                }
            }
        }
        _ => reply::error(
            405,
            "the server does not allow this method on the requested resource",
            None,
        ),
    }
}

/// The request's `Content-Type`, empty when it has none (or it is not text).
fn content_type<B>(req: &Request<B>) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}
