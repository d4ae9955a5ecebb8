//! Reviews: `SelfSubjectAccessReview` (`kubectl auth can-i`), `SelfSubjectRulesReview`
//! (`kubectl auth can-i --list`) and `SelfSubjectReview` (`kubectl auth whoami`). Created
//! and answered at once, never stored, as kube-apiserver does.
//!
//! The embedded server authorizes nothing: every request that passes authentication is
//! allowed, so every review answers as kube-apiserver's `AlwaysAllow` authorizer does
//! (`allowed: true`, no reason; every rule `*`). The subject is the request's user: the
//! token's user with `--token`, else `system:anonymous`.

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::reply::{self, Body};
use super::resources::Resource;

/// Who a request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: &'static str,
    /// Whether the request carried credentials that the server checked.
    pub authenticated: bool,
}

impl User {
    fn groups(self) -> Value {
        if self.authenticated {
            json!(["system:authenticated"])
        } else {
            json!(["system:unauthenticated"])
        }
    }
}

/// Answer the review `object` (decoded, apiVersion and kind checked) of `resource`.
pub fn answer(resource: &Resource, mut object: Value, user: User) -> Response<Body> {
    let status = match resource.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let spec = object.get("spec").cloned().unwrap_or(Value::Null);
            let resource_attributes = spec.get("resourceAttributes").filter(|a| a.is_object());
            let non_resource = spec.get("nonResourceAttributes").filter(|a| a.is_object());
            if resource_attributes.is_some() == non_resource.is_some() {
                return invalid(
                    resource,
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                );
            }
            json!({"allowed": true})
        }
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => json!({"userInfo": {"username": user.name, "groups": user.groups()}}),
    };
    object["status"] = status;
    if object.get("metadata").is_none_or(Value::is_null) {
        object["metadata"] = json!({});
    }
    reply::json(StatusCode::CREATED, &object)
}

/// kube-apiserver's 422 for an invalid review.
fn invalid(resource: &Resource, field: &str, message: &str) -> Response<Body> {
    reply::error(
        422,
        &format!(
            "{}.{} \"\" is invalid: {field}: Invalid value: \"null\": {message}",
            resource.kind, resource.group
        ),
        Some(json!({
            "group": resource.group,
            "kind": resource.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"null\": {message}"), "field": field}],
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::Registry;

    fn review(plural: &str, group: &str) -> std::sync::Arc<Resource> {
        Registry::new().get(group, "v1", plural).expect("served")
    }

    async fn body(response: Response<Body>) -> (u16, Value) {
        use http_body_util::BodyExt;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&bytes).expect("json"))
    }

    const TOKEN_USER: User = User {
        name: "kstage:token",
        authenticated: true,
    };

    #[tokio::test]
    async fn an_access_review_is_allowed_and_keeps_its_spec() {
        let ssar = review("selfsubjectaccessreviews", "authorization.k8s.io");
        let spec = json!({"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "default"}});
        let object = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec});
        let (code, answer) = body(answer(&ssar, object, TOKEN_USER)).await;
        assert_eq!(code, 201);
        assert_eq!(answer["status"], json!({"allowed": true}));
        assert_eq!(answer["spec"], spec);
        let (code, refused) = body(answer_of(&ssar, json!({"spec": {}}))).await;
        assert_eq!(code, 422, "{refused}");
    }

    fn answer_of(resource: &Resource, object: Value) -> Response<Body> {
        answer(resource, object, TOKEN_USER)
    }

    #[tokio::test]
    async fn a_self_review_names_the_user() {
        let ssr = review("selfsubjectreviews", "authentication.k8s.io");
        let anonymous = User {
            name: "system:anonymous",
            authenticated: false,
        };
        let (_, answer) = body(answer(&ssr, json!({}), anonymous)).await;
        assert_eq!(
            answer["status"]["userInfo"],
            json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]})
        );
        let (_, answer) = body(answer_of(&ssr, json!({}))).await;
        assert_eq!(answer["status"]["userInfo"]["username"], "kstage:token");
    }
}
