//! Responses: JSON bodies, streamed bodies, and Kubernetes `Status` errors with the
//! reason, code and message a real API server gives.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::resources::Resource;
use crate::cluster::{ApiError, status_reason};

/// A response body: whole, or streamed (watches).
pub type Body = BoxBody<Bytes, Infallible>;

/// A response with a JSON body.
pub fn json_bytes(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A response with `value` as JSON.
pub fn json(status: StatusCode, value: &Value) -> Response<Body> {
    json_bytes(status, serde_json::to_vec(value).unwrap_or_default())
}

/// A streamed JSON response fed by `rx` (one chunk per message).
pub fn stream(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    let mut response = Response::new(StreamBody::new(frames).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A `Status` body for an error; an empty `reason` is left out (as kube-apiserver does
/// for an internal error).
pub fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    });
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    if let Some(d) = details {
        status["details"] = d;
    }
    status
}

/// An error response with a `Status` body.
pub fn error(code: u16, message: &str, details: Option<Value>) -> Response<Body> {
    error_with_reason(code, status_reason(code), message, details)
}

/// kube-apiserver's 400 for a query parameter it could not convert.
pub fn bad_parameter(message: &str) -> Response<Body> {
    error(400, message, None)
}

/// kube-apiserver's answer to an error its storage layer returns unconverted (a
/// malformed `resourceVersion`): a 500 without a reason.
pub fn storage_error(message: &str) -> Response<Body> {
    error_with_reason(500, "", message, None)
}

/// 404 for a path that names no resource.
pub fn not_found() -> Response<Body> {
    error(
        404,
        "the server could not find the requested resource",
        None,
    )
}

/// `pods` or `stages.kwok.x-k8s.io`, as errors name a resource.
pub fn qualified(resource: &Resource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// `Pod` or `Stage.kwok.x-k8s.io`, as a validation error names a kind.
fn qualified_kind(resource: &Resource) -> String {
    if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    }
}

/// The response to a store error about object `name` of `resource`.
pub fn api_error(resource: &Resource, name: &str, e: &ApiError) -> Response<Body> {
    let what = qualified(resource);
    // As kube-apiserver: the group only when there is one; `kind` is the plural, but
    // the Kind for a validation error.
    let details = |kind: &str| {
        let mut details = json!({"name": name, "kind": kind});
        if !resource.group.is_empty() {
            details["group"] = json!(resource.group);
        }
        details
    };
    let message = match e {
        ApiError::FieldInvalid(errors) => {
            let mut details = details(&resource.kind);
            let causes: Vec<Value> = errors
                .0
                .iter()
                .map(|e| json!({"field": e.field, "message": e.message, "reason": e.reason}))
                .collect();
            details["causes"] = Value::Array(causes);
            let message = format!("{} {name:?} is invalid: {errors}", qualified_kind(resource));
            return error_with_reason(422, "Invalid", &message, Some(details));
        }
        // kube-apiserver says no more than this of a JSON patch that did not apply.
        ApiError::PatchFailed(_) => {
            return error_with_reason(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
                Some(json!({})),
            );
        }
        ApiError::NotFound(_) => format!("{what} {name:?} not found"),
        ApiError::AlreadyExists(_) => format!("{what} {name:?} already exists"),
        ApiError::Conflict(_) => format!(
            "Operation cannot be fulfilled on {what} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
        ),
        ApiError::Invalid(m) => format!("{} {name:?} is invalid: {m}", qualified_kind(resource)),
        ApiError::BadRequest(m) | ApiError::Forbidden(m) | ApiError::Unavailable(m) => m.clone(),
        ApiError::UnsupportedMediaType(_) => format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted_patch_types(resource)
        ),
    };
    let reason = match e {
        ApiError::AlreadyExists(_) => "AlreadyExists",
        _ => crate::cluster::status_reason(e.status()),
    };
    error_with_reason(
        e.status(),
        reason,
        &message,
        Some(details(&resource.plural)),
    )
}

/// An error response with a `Status` body and the given `reason`.
pub fn error_with_reason(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, &status_body(code, reason, message, details))
}

/// The PATCH content types a resource accepts.
pub fn accepted_patch_types(resource: &Resource) -> &'static str {
    if resource.builtin {
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    }
}
