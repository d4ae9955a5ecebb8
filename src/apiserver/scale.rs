//! The `scale` subresource of Deployments (`kubectl scale`): an `autoscaling/v1` `Scale`
//! read from the Deployment, and written back as its `spec.replicas`. Nothing else
//! happens (no controller runs here): `status.replicas` stays what was last written.
#![allow(clippy::result_large_err)]

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::reply::{self, Body};
use super::resources::Resource;
use super::state::State;
use crate::cluster::{ApiError, ObjectKey};
use crate::patch::PatchType;

/// The `Scale` of `deployment`.
pub fn of(deployment: &Value) -> Value {
    let meta = |field: &str| deployment.pointer(&format!("/metadata/{field}")).cloned();
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta(field) {
            metadata.insert(field.into(), v);
        }
    }
    // A Deployment created without replicas has 1 (kube-apiserver's default).
    let replicas = deployment
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let mut spec = json!({});
    if replicas != 0 {
        spec["replicas"] = json!(replicas);
    }
    let mut status = json!({
        "replicas": deployment.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
    });
    let selector = selector(deployment.pointer("/spec/selector"));
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// A label selector as a string (`app=web,tier in (a,b)`), as kube-apiserver writes
/// `status.selector`.
fn selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let mut parts: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or("");
        let values: Vec<&str> = expression["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match expression["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_owned(),
        });
    }
    parts.sort();
    parts.join(",")
}

/// `GET .../deployments/NAME/scale`.
pub fn get(state: &State, resource: &Resource, key: &ObjectKey) -> Response<Body> {
    match state.get(key) {
        Ok(deployment) => reply::json(StatusCode::OK, &of(&deployment)),
        Err(e) => reply::api_error(resource, &key.name, &e),
    }
}

/// `PUT` a `Scale` (`scale`, decoded): its `spec.replicas` becomes the Deployment's. A
/// `metadata.resourceVersion` in it must be the Deployment's (else 409).
pub fn update(
    state: &State,
    resource: &Resource,
    key: &ObjectKey,
    scale: &Value,
) -> Response<Body> {
    if let Some(wanted) = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
    {
        match state.get(key) {
            Ok(current)
                if current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    != Some(wanted) =>
            {
                return reply::api_error(resource, &key.name, &ApiError::Conflict(key.to_string()));
            }
            Ok(_) => {}
            Err(e) => return reply::api_error(resource, &key.name, &e),
        }
    }
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    set_replicas(state, resource, key, replicas)
}

/// `PATCH` the `Scale`: the patch applies to the Scale, whose `spec.replicas` then becomes
/// the Deployment's.
pub fn patch(
    state: &State,
    resource: &Resource,
    key: &ObjectKey,
    patch_type: PatchType,
    data: &Value,
) -> Response<Body> {
    let current = match state.get(key) {
        Ok(d) => of(&d),
        Err(e) => return reply::api_error(resource, &key.name, &e),
    };
    // A Scale has no lists to merge by key: a strategic patch is a merge patch.
    let as_type = match patch_type {
        PatchType::Json => PatchType::Json,
        _ => PatchType::Merge,
    };
    match crate::patch::apply(&current, as_type, data, "Scale") {
        Ok(patched) => update(state, resource, key, &patched),
        Err(e) => reply::error(422, &e.to_string(), None),
    }
}

fn set_replicas(
    state: &State,
    resource: &Resource,
    key: &ObjectKey,
    replicas: i64,
) -> Response<Body> {
    if replicas < 0 {
        return reply::error(
            422,
            &format!(
                "Scale.autoscaling \"{}\" is invalid: spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0",
                key.name
            ),
            None,
        );
    }
    let data = json!({"spec": {"replicas": replicas}});
    match state.patch(key, PatchType::Merge, None, data) {
        Ok(saved) => reply::json(StatusCode::OK, &of(&saved.object)),
        Err(e) => reply::api_error(resource, &key.name, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_carries_replicas_and_the_selector() {
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
            }},
        });
        let scale = of(&deployment);
        assert_eq!(scale["spec"], json!({"replicas": 3}));
        assert_eq!(
            scale["status"],
            json!({"replicas": 0, "selector": "app=web,tier in (a,b)"})
        );
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        let unset = of(&json!({"metadata": {"name": "web"}, "spec": {}}));
        assert_eq!(unset["spec"]["replicas"], 1);
        let zero = of(&json!({"metadata": {"name": "web"}, "spec": {"replicas": 0}}));
        assert_eq!(zero["spec"], json!({}));
    }
}
