//! What kube-apiserver refuses in an object's metadata, with its field paths and messages
//! (k8s.io/apimachinery's ObjectMeta validation): the name, label keys and values,
//! annotation keys and their total size, finalizer names, and a Namespace's
//! `spec.finalizers`. The store runs it on every create and on every write that changes
//! the metadata (update, patch, apply), for every kind it holds.
//!
//! A [`FieldError`] is one entry of a 422's `details.causes`; [`FieldErrors`] prints as the
//! Status message does after `Kind "name" is invalid: ` (one error as is, several in
//! brackets, repeated ones once).

use std::fmt;

use serde_json::{Map, Value};

use super::ObjectKey;

/// The most bytes the annotations of an object may hold, keys and values together.
pub const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

/// The regular expression kube-apiserver quotes for a DNS subdomain.
const SUBDOMAIN_PATTERN: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/// The regular expression kube-apiserver quotes for a DNS label.
const LABEL_PATTERN: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
/// The regular expression kube-apiserver quotes for the name part of a qualified name.
const KEY_PATTERN: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
/// What a name part of a qualified name must look like.
const KEY_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
/// The finalizers Kubernetes itself uses, the only ones a Namespace's `spec.finalizers`
/// may name without a `/`.
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// One invalid field, as a `details.causes` entry of kube-apiserver's 422.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `metadata.labels`.
    pub field: &'static str,
    /// The cause's reason, e.g. `FieldValueInvalid`.
    pub reason: &'static str,
    /// What is wrong, e.g. `Invalid value: "-1h": a valid label must be ...`.
    pub message: String,
}

impl FieldError {
    /// `value` of `field` is invalid because of `detail`.
    pub fn invalid(field: &'static str, value: &str, detail: &str) -> Self {
        Self {
            field,
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", go_quote(value)),
        }
    }

    /// `field` holds more than `max` bytes (the value is not repeated).
    pub fn too_long(field: &'static str, max: usize) -> Self {
        Self {
            field,
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
        }
    }

    /// `field` is missing.
    pub fn required(field: &'static str, detail: &str) -> Self {
        Self {
            field,
            reason: "FieldValueRequired",
            message: format!("Required value: {detail}"),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The invalid fields of one write, in the order kube-apiserver checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut seen: Vec<String> = Vec::new();
        for error in &self.0 {
            let line = error.to_string();
            if !seen.contains(&line) {
                seen.push(line);
            }
        }
        match seen.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

/// Every problem kube-apiserver finds in the metadata of `object` (named `key`), and in a
/// Namespace's `spec.finalizers`.
pub fn object(key: &ObjectKey, object: &Value) -> Vec<FieldError> {
    let mut errors = name(key);
    if let Some(meta) = object.get("metadata").and_then(Value::as_object) {
        errors.extend(metadata(meta));
    }
    if key.api_version == "v1" && key.kind == "Namespace" {
        let finalizers = strings(object.pointer("/spec/finalizers"));
        for f in finalizers {
            for msg in qualified_name(f) {
                errors.push(FieldError::invalid("spec.finalizers", f, &msg));
            }
            if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
                errors.push(FieldError::invalid(
                    "spec.finalizers",
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    errors
}

/// The problems of labels, annotations and finalizers.
fn metadata(meta: &Map<String, Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (key, value) in labels {
            for msg in qualified_name(key) {
                errors.push(FieldError::invalid("metadata.labels", key, &msg));
            }
            let value = value.as_str().unwrap_or("");
            for msg in label_value(value) {
                errors.push(FieldError::invalid("metadata.labels", value, &msg));
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut size = 0;
        for (key, value) in annotations {
            // Annotation keys are qualified names whatever their case.
            for msg in qualified_name(&key.to_lowercase()) {
                errors.push(FieldError::invalid("metadata.annotations", key, &msg));
            }
            size += key.len() + value.as_str().map_or(0, str::len);
        }
        if size > TOTAL_ANNOTATION_SIZE {
            errors.push(FieldError::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE,
            ));
        }
    }
    let finalizers = strings(meta.get("finalizers"));
    for f in &finalizers {
        for msg in qualified_name(f) {
            errors.push(FieldError::invalid("metadata.finalizers", f, &msg));
        }
    }
    if finalizers.contains(&"orphan") && finalizers.contains(&"foregroundDeletion") {
        errors.push(FieldError {
            field: "metadata.finalizers",
            reason: "FieldValueInvalid",
            message: format!(
                "Invalid value: {}: finalizer orphan and foregroundDeletion cannot be both set",
                Value::from(finalizers.clone())
            ),
        });
    }
    errors
}

/// The strings of a JSON array (none when it is not one).
fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// An object's name as kube-apiserver validates it: a DNS label (63 bytes) for
/// Namespaces, a DNS subdomain (253) for the other built-in kinds, a path segment (no
/// `/` or `%`, not `.` or `..`) for custom resources.
pub fn name(key: &ObjectKey) -> Vec<FieldError> {
    let name = key.name.as_str();
    let details = if key.api_version == "v1" && key.kind == "Namespace" {
        dns_label(name)
    } else if super::is_builtin(&key.api_version) {
        dns_subdomain(name)
    } else {
        path_segment(name)
    };
    details
        .iter()
        .map(|d| FieldError::invalid("metadata.name", name, d))
        .collect()
}

/// What makes `value` no DNS (RFC 1123) label.
pub fn dns_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len(63));
    }
    if !is_dns_label(value) {
        if value.split('.').all(is_dns_label) {
            errors.push("must not contain dots".to_owned());
        } else {
            errors.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                LABEL_PATTERN,
                &["my-name", "123-abc"],
            ));
        }
    }
    errors
}

/// What makes `value` no DNS (RFC 1123) subdomain.
pub fn dns_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push(max_len(253));
    }
    if !value.split('.').all(is_dns_label) {
        errors.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            SUBDOMAIN_PATTERN,
            &["example.com"],
        ));
    }
    errors
}

/// What makes `value` no name of a custom resource (a path segment).
fn path_segment(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| value.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// What makes `value` no qualified name (a label key, an annotation key, a finalizer):
/// an optional DNS subdomain prefix and `/`, then a name of at most 63 bytes.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(KEY_RULE, KEY_PATTERN, &["MyName", "my.name", "123-abc"])
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push(format!("name part {}", max_len(63)));
    }
    if !is_key_name(name) {
        errors.push(format!(
            "name part {}",
            regex_error(KEY_RULE, KEY_PATTERN, &["MyName", "my.name", "123-abc"])
        ));
    }
    errors
}

/// What makes `value` no label value: at most 63 bytes, empty or a name part.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len(63));
    }
    if !value.is_empty() && !is_key_name(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({KEY_PATTERN})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_dns_label(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_key_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// apimachinery's "too long" detail of a format check.
fn max_len(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

/// apimachinery's detail of a failed regular expression: the rule, examples, the
/// expression.
fn regex_error(rule: &str, pattern: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{rule} (e.g. {}regex used for validation is '{pattern}')",
        examples.join(" or ")
    )
}

/// A string quoted as Go's `%q` does for the text kube-apiserver echoes (quotes,
/// backslashes and control characters escaped).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(api_version: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn pod(meta: Value) -> Value {
        let mut metadata = json!({"name": "p", "namespace": "default"});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata})
    }

    /// A cause expected: field, reason, message.
    type Expected = (&'static str, &'static str, String);

    const KEY_DETAIL: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_DETAIL: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const SUBDOMAIN_DETAIL: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn metadata_is_refused_field_by_field_with_kube_apiservers_messages() {
        let long = "a".repeat(64);
        let prefix = "b".repeat(254);
        let cases: Vec<(Value, Vec<Expected>)> = vec![
            // Valid: nothing to say.
            (
                json!({"labels": {"app": "web", "example.com/Tier_1": "", "a": "A.b-c_9"},
                       "annotations": {"Example.COM/Note": "anything at all: ✓"},
                       "finalizers": ["example.com/hold", "kubernetes", "orphan"]}),
                vec![],
            ),
            (
                json!({"labels": {"ttl": "-99999h"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"-99999h\": {VALUE_DETAIL}"),
                )],
            ),
            (
                json!({"labels": {"a": long}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"{long}\": must be no more than 63 bytes"),
                )],
            ),
            (
                json!({"labels": {"-a": "x"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"-a\": name part {KEY_DETAIL}"),
                )],
            ),
            (
                json!({"labels": {"Example.com/a": "x"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"Example.com/a\": prefix part {SUBDOMAIN_DETAIL}"),
                )],
            ),
            (
                json!({"labels": {format!("{prefix}/a"): "x"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"{prefix}/a\": prefix part must be no more than 253 bytes"),
                )],
            ),
            (
                json!({"labels": {"/a": "x"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    "Invalid value: \"/a\": prefix part must be non-empty".to_owned(),
                )],
            ),
            (
                json!({"labels": {"a/": "x"}}),
                vec![
                    (
                        "metadata.labels",
                        "FieldValueInvalid",
                        "Invalid value: \"a/\": name part must be non-empty".to_owned(),
                    ),
                    (
                        "metadata.labels",
                        "FieldValueInvalid",
                        format!("Invalid value: \"a/\": name part {KEY_DETAIL}"),
                    ),
                ],
            ),
            (
                json!({"labels": {"a/b/c": "x"}}),
                vec![(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: \"a/b/c\": a valid label key {KEY_DETAIL} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
                )],
            ),
            (
                json!({"annotations": {"a b": "x"}}),
                vec![(
                    "metadata.annotations",
                    "FieldValueInvalid",
                    format!("Invalid value: \"a b\": name part {KEY_DETAIL}"),
                )],
            ),
            (
                json!({"annotations": {"big": "x".repeat(TOTAL_ANNOTATION_SIZE - 2)}}),
                vec![(
                    "metadata.annotations",
                    "FieldValueTooLong",
                    "Too long: may not be more than 262144 bytes".to_owned(),
                )],
            ),
            (
                json!({"finalizers": ["example.com/a/b"]}),
                vec![(
                    "metadata.finalizers",
                    "FieldValueInvalid",
                    format!("Invalid value: \"example.com/a/b\": a valid label key {KEY_DETAIL} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
                )],
            ),
            (
                json!({"finalizers": ["orphan", "foregroundDeletion"]}),
                vec![(
                    "metadata.finalizers",
                    "FieldValueInvalid",
                    "Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set".to_owned(),
                )],
            ),
        ];
        for (meta, expected) in cases {
            let object = pod(meta.clone());
            let got: Vec<Expected> = super::object(&key("v1", "Pod", "p"), &object)
                .into_iter()
                .map(|e| (e.field, e.reason, e.message))
                .collect();
            assert_eq!(got, expected, "{meta}");
        }
        // The annotation limit counts keys and values, in bytes: at the limit it passes.
        let at_limit = pod(json!({"annotations": {"big": "x".repeat(TOTAL_ANNOTATION_SIZE - 3)}}));
        assert!(super::object(&key("v1", "Pod", "p"), &at_limit).is_empty());
    }

    #[test]
    fn names_and_namespace_finalizers_follow_their_kinds_rules() {
        let bad = |api_version: &str, kind: &str, name: &str| {
            super::name(&key(api_version, kind, name))
                .into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            bad("v1", "Pod", "a..b/c"),
            [format!("Invalid value: \"a..b/c\": {SUBDOMAIN_DETAIL}")]
        );
        assert_eq!(
            bad("v1", "Namespace", "a.b"),
            ["Invalid value: \"a.b\": must not contain dots"]
        );
        assert!(bad("v1", "Namespace", "team-1").is_empty());
        assert_eq!(
            bad("kwok.x-k8s.io/v1alpha1", "Stage", "a/b"),
            ["Invalid value: \"a/b\": may not contain '/'"]
        );
        assert!(bad("kwok.x-k8s.io/v1alpha1", "Stage", "Any_Case.ok").is_empty());
        // A Namespace's spec.finalizers: standard names, or qualified with a prefix.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"},
                        "spec": {"finalizers": ["kubernetes", "example.com/x", "mine"]}});
        let errors = super::object(&key("v1", "Namespace", "team"), &ns);
        assert_eq!(
            errors,
            [FieldError::invalid(
                "spec.finalizers",
                "mine",
                "name is neither a standard finalizer name nor is it fully qualified"
            )]
        );
    }

    #[test]
    fn several_errors_print_as_kube_apiservers_aggregate() {
        let one = FieldError::invalid("metadata.labels", "-x", "bad");
        let two = FieldError::too_long("metadata.annotations", 3);
        assert_eq!(
            FieldErrors(vec![one.clone()]).to_string(),
            "metadata.labels: Invalid value: \"-x\": bad"
        );
        assert_eq!(
            FieldErrors(vec![one.clone(), two, one]).to_string(),
            "[metadata.labels: Invalid value: \"-x\": bad, metadata.annotations: Too long: may not be more than 3 bytes]"
        );
        assert_eq!(go_quote("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
    }
}
