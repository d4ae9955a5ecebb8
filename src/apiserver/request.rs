//! What a request asks for: the route of its path and its query parameters.

use std::collections::HashMap;

/// Where a resource request points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The API group, `""` for core.
    pub group: String,
    /// The version.
    pub version: String,
    /// The resource's plural name.
    pub plural: String,
    /// The namespace in the path, if any.
    pub namespace: Option<String>,
    /// The object's name, for an object (not a collection).
    pub name: Option<String>,
    /// The subresource (`status`), if any.
    pub subresource: Option<String>,
}

/// The route of a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/GROUP`.
    Group(String),
    /// `/api/v1`, `/apis/GROUP/VERSION`.
    Resources {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// A collection or an object.
    Resource(Target),
    /// `/kstage/faults`: the fault injection admin endpoint.
    Faults,
    /// `/openapi/v3`.
    OpenApiRoot,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`.
    OpenApi {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// Anything else.
    NotFound,
}

impl Route {
    /// The route of `path`.
    pub fn parse(path: &str) -> Route {
        let parts: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        match parts.as_slice() {
            ["version"] => Route::Version,
            ["healthz" | "livez" | "readyz", ..] => Route::Health,
            ["api"] => Route::CoreVersions,
            ["apis"] => Route::Groups,
            ["apis", group] => Route::Group((*group).to_owned()),
            ["kstage", "faults"] => Route::Faults,
            ["openapi", "v3"] => Route::OpenApiRoot,
            ["openapi", "v3", "api", version] => Route::OpenApi {
                group: String::new(),
                version: (*version).to_owned(),
            },
            ["openapi", "v3", "apis", group, version] => Route::OpenApi {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            },
            ["api", version] => Route::Resources {
                group: String::new(),
                version: (*version).to_owned(),
            },
            ["apis", group, version] => Route::Resources {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            },
            ["api", version, rest @ ..] => target("", version, rest),
            ["apis", group, version, rest @ ..] => target(group, version, rest),
            _ => Route::NotFound,
        }
    }
}

fn target(group: &str, version: &str, rest: &[&str]) -> Route {
    let make = |namespace: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(Target {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
        })
    };
    match rest {
        // `/namespaces/NS/PLURAL...`, but `/namespaces/NAME/status` is a Namespace's status.
        ["namespaces", ns, plural] if !matches!(*plural, "status" | "finalize") => {
            make(Some(ns), plural, None, None)
        }
        ["namespaces", ns, plural, name] => make(Some(ns), plural, Some(name), None),
        ["namespaces", ns, plural, name, sub] => make(Some(ns), plural, Some(name), Some(sub)),
        [plural] => make(None, plural, None, None),
        [plural, name] => make(None, plural, Some(name), None),
        [plural, name, sub] => make(None, plural, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

/// What a request to a resource does (Kubernetes' request verbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET one object.
    Get,
    /// GET a collection.
    List,
    /// GET a collection with `watch=true`.
    Watch,
    /// POST a new object.
    Create,
    /// PUT an object.
    Update,
    /// PATCH an object.
    Patch,
    /// PATCH with `application/apply-patch+yaml`.
    Apply,
    /// DELETE one object.
    Delete,
    /// DELETE a collection.
    DeleteCollection,
}

impl Verb {
    /// Whether it writes (and so waits for the configured write latency).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Verb::Create
                | Verb::Update
                | Verb::Patch
                | Verb::Apply
                | Verb::Delete
                | Verb::DeleteCollection
        )
    }

    /// The verb fault rules name it by (`delete` for both deletes).
    pub fn fault_verb(self) -> crate::cluster::faults::Verb {
        use crate::cluster::faults::Verb as F;
        match self {
            Verb::Get => F::Get,
            Verb::List => F::List,
            Verb::Watch => F::Watch,
            Verb::Create => F::Create,
            Verb::Update => F::Update,
            Verb::Patch => F::Patch,
            Verb::Apply => F::Apply,
            Verb::Delete | Verb::DeleteCollection => F::Delete,
        }
    }
}

/// The query parameters, decoded.
#[derive(Debug, Clone, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parse a query string (`a=b&c=d`, `+` for space, percent-encoding).
    pub fn parse(query: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            );
        }
        Self(map)
    }

    /// A parameter, if given and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// An integer parameter, if given: `Err` with Go's `strconv.ParseInt` message when
    /// it is not one (kube-apiserver answers that as a 400).
    pub fn int(&self, key: &str) -> Result<Option<i64>, String> {
        let Some(text) = self.get(key) else {
            return Ok(None);
        };
        text.parse::<i64>().map(Some).map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            format!("strconv.ParseInt: parsing {text:?}: {why}")
        })
    }

    /// The `resourceVersion` to list or watch from: none for absent or `0`; `Err` with
    /// kube-apiserver's message for one that is not a number.
    pub fn resource_version(&self) -> Result<Option<u64>, String> {
        match self.get("resourceVersion") {
            None | Some("0") => Ok(None),
            Some(rv) => rv.parse::<u64>().map(Some).map_err(|_| {
                format!(
                    "resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: invalid syntax"
                )
            }),
        }
    }

    /// A boolean parameter (`true` or `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// Decode `%XX` escapes; invalid escapes are kept as they are.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(
        group: &str,
        plural: &str,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Route {
        Route::Resource(Target {
            group: group.into(),
            version: if group.is_empty() {
                "v1".into()
            } else {
                "v1alpha1".into()
            },
            plural: plural.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        })
    }

    #[test]
    fn paths_route_like_the_api_server() {
        assert_eq!(Route::parse("/api"), Route::CoreVersions);
        assert_eq!(
            Route::parse("/apis/kwok.x-k8s.io"),
            Route::Group("kwok.x-k8s.io".into())
        );
        assert_eq!(
            Route::parse("/api/v1"),
            Route::Resources {
                group: "".into(),
                version: "v1".into()
            }
        );
        assert_eq!(
            Route::parse("/api/v1/pods"),
            t("", "pods", None, None, None)
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/default/pods"),
            t("", "pods", Some("default"), None, None)
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/default/pods/p/status"),
            t("", "pods", Some("default"), Some("p"), Some("status"))
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/default"),
            t("", "namespaces", None, Some("default"), None)
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/default/status"),
            t("", "namespaces", None, Some("default"), Some("status"))
        );
        assert_eq!(
            Route::parse("/apis/kwok.x-k8s.io/v1alpha1/stages/node-ready"),
            t("kwok.x-k8s.io", "stages", None, Some("node-ready"), None)
        );
        assert_eq!(Route::parse("/nope"), Route::NotFound);
    }

    #[test]
    fn queries_are_decoded() {
        let q = Query::parse(Some("labelSelector=app+in+%28a%2Cb%29&watch=1&limit=&x"));
        assert_eq!(q.get("labelSelector"), Some("app in (a,b)"));
        assert!(q.flag("watch"));
        assert_eq!(q.get("limit"), None);
        assert_eq!(percent_decode("100%"), "100%");
    }
}
