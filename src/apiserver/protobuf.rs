//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl and
//! client-go's typed clients send built-in kinds: decoded into the JSON object the rest
//! of the server works on, the object kube-apiserver would have decoded and written back
//! as JSON. Answers stay JSON (these clients accept it too).
//!
//! A body is the magic `k8s\0` and a `runtime.Unknown` envelope: `typeMeta` (apiVersion,
//! kind), `raw` (the kind's own message), `contentEncoding` and `contentType`. The kind's
//! message is read field by field against a schema, `protobuf_schema.json` beside this
//! file, written by `scripts/protobuf-schema.py`: field numbers and wire types from the
//! `k8s-pb` crate (prost code generated from Kubernetes' `generated.proto` files), JSON
//! field names and required fields from `k8s-openapi`, which kstage already depends on.
//!
//! Why not decode with `k8s-pb` itself: its prost structs decode the wire format, but
//! they have no serde and no conversion to k8s-openapi, so every one of their hundreds of
//! types would need a hand-written conversion to JSON. `prost` with `k8s-openapi` has the
//! same gap (k8s-openapi has serde but no protobuf). A schema read at run time covers all
//! served kinds with one small walker and no new dependency.
//!
//! The JSON is the one Go's `encoding/json` writes for the decoded Go object (what
//! kubectl would have sent as JSON):
//! - a Go value-typed field is always on the wire, a pointer only when set; in JSON a
//!   zero `omitempty` value is left out. So a zero scalar (`""`, `0`, `false`) is dropped
//!   unless the field is required (k8s-openapi: not an `Option`) or a known pointer
//!   ([`POINTERS`]: `replicas: 0` stays);
//! - a message on the wire is kept even when empty (`spec: {}`, `emptyDir: {}`), as Go
//!   writes a struct; a zero `Time` is `null` (`creationTimestamp: null`);
//! - `Time` is RFC 3339 in seconds, `MicroTime` in microseconds; `Quantity` its string;
//!   `IntOrString` a number or a string; `bytes` (Secret data) base64; `FieldsV1` and
//!   `RawExtension` the JSON they hold; inline Go structs (Volume's VolumeSource) are
//!   merged into their parent;
//! - a required list or map that is empty is `null` (a PolicyRule's `verbs`).

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What starts every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error("provided object is not protobuf: missing magic prefix")]
    NoMagic,
    /// The envelope names a kind this server has no schema for.
    #[error("no protobuf schema for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The bytes are not a valid message.
    #[error("unable to decode protobuf: {0}")]
    Wire(String),
}

/// Value-typed fields in Go (written even when zero) are dropped when zero; these are Go
/// pointers, present only when set, so a zero among them is meant (`Message.field`).
pub const POINTERS: &[&str] = &[
    "ObjectMeta.deletionGracePeriodSeconds",
    "DeploymentSpec.replicas",
    "DeploymentSpec.revisionHistoryLimit",
    "DeploymentSpec.progressDeadlineSeconds",
    "JobSpec.parallelism",
    "JobSpec.completions",
    "JobSpec.activeDeadlineSeconds",
    "JobSpec.backoffLimit",
    "JobSpec.backoffLimitPerIndex",
    "JobSpec.maxFailedIndexes",
    "JobSpec.ttlSecondsAfterFinished",
    "JobSpec.suspend",
    "JobSpec.manualSelector",
    "PodSpec.terminationGracePeriodSeconds",
    "PodSpec.activeDeadlineSeconds",
    "PodSpec.automountServiceAccountToken",
    "PodSpec.shareProcessNamespace",
    "PodSpec.priority",
    "PodSpec.enableServiceLinks",
    "PodSpec.hostUsers",
    "PodSpec.setHostnameAsFQDN",
    "ConfigMap.immutable",
    "Secret.immutable",
    "ServiceAccount.automountServiceAccountToken",
    "ServiceSpec.allocateLoadBalancerNodePorts",
    "SecurityContext.privileged",
    "SecurityContext.runAsUser",
    "SecurityContext.runAsGroup",
    "SecurityContext.runAsNonRoot",
    "SecurityContext.readOnlyRootFilesystem",
    "SecurityContext.allowPrivilegeEscalation",
    "PodSecurityContext.runAsUser",
    "PodSecurityContext.runAsGroup",
    "PodSecurityContext.runAsNonRoot",
    "PodSecurityContext.fsGroup",
    "SecretVolumeSource.defaultMode",
    "SecretVolumeSource.optional",
    "ConfigMapVolumeSource.defaultMode",
    "ConfigMapVolumeSource.optional",
    "KeyToPath.mode",
    "ConfigMapKeySelector.optional",
    "SecretKeySelector.optional",
    "ConfigMapEnvSource.optional",
    "SecretEnvSource.optional",
    "LeaseSpec.leaseDurationSeconds",
    "LeaseSpec.leaseTransitions",
    "DeleteOptions.gracePeriodSeconds",
    "DeleteOptions.orphanDependents",
];

/// One field of a message, as `protobuf_schema.json` lists it.
#[derive(Debug, serde::Deserialize)]
struct Field {
    /// The field number.
    n: u32,
    /// Its JSON name.
    json: String,
    /// `string`, `bool`, `int32`, `int64`, `double`, `bytes`, `message`,
    /// `map_string`, `map_bytes`, `map_message`.
    #[serde(rename = "type")]
    type_: String,
    /// The message (or map value message) type.
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    repeated: bool,
    #[serde(default)]
    required: bool,
    /// A Go struct embedded inline: its fields are the parent's.
    #[serde(default)]
    inline: bool,
}

#[derive(Debug, serde::Deserialize)]
struct SchemaFile {
    messages: HashMap<String, Vec<Field>>,
}

/// The messages by full name, their fields by number.
#[derive(Debug)]
struct Schema {
    messages: HashMap<String, HashMap<u32, Field>>,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let file: SchemaFile = serde_json::from_str(include_str!("protobuf_schema.json"))
            .unwrap_or(SchemaFile {
                messages: HashMap::new(),
            });
        Schema {
            messages: file
                .messages
                .into_iter()
                .map(|(name, fields)| (name, fields.into_iter().map(|f| (f.n, f)).collect()))
                .collect(),
        }
    })
}

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// The protobuf message of objects of `api_version` and `kind`, if the server has it.
fn message_of(api_version: &str, kind: &str) -> Option<String> {
    if kind == "DeleteOptions" {
        return Some(format!("{META}.DeleteOptions"));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group.split('.').next().unwrap_or("") {
        "" => "core",
        first => first,
    };
    let name = format!("k8s.io.api.{package}.{version}.{kind}");
    schema().messages.contains_key(&name).then_some(name)
}

/// Whether objects of `api_version` and `kind` can be sent as protobuf.
pub fn decodes(api_version: &str, kind: &str) -> bool {
    message_of(api_version, kind).is_some()
}

/// The envelope of a protobuf body: its apiVersion and kind, and the raw message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: String,
    /// `typeMeta.kind`.
    pub kind: String,
    /// The kind's message.
    pub raw: &'a [u8],
}

/// Read the `k8s\0` + `runtime.Unknown` envelope of `body`.
pub fn envelope(body: &[u8]) -> Result<Envelope<'_>, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let mut out = Envelope {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
    };
    let mut reader = Reader(rest);
    while let Some((number, value)) = reader.field()? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                let mut inner = Reader(type_meta);
                while let Some((n, v)) = inner.field()? {
                    match (n, v) {
                        (1, Wire::Bytes(b)) => out.api_version = text(b)?,
                        (2, Wire::Bytes(b)) => out.kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(raw)) => out.raw = raw,
            (3, Wire::Bytes(encoding)) if !encoding.is_empty() => {
                return Err(ProtobufError::Wire(format!(
                    "unsupported content encoding {:?}",
                    String::from_utf8_lossy(encoding)
                )));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Decode a protobuf body into the object it holds, with its `apiVersion` and `kind`.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = envelope(body)?;
    let Some(name) = message_of(&envelope.api_version, &envelope.kind) else {
        return Err(ProtobufError::UnknownKind {
            api_version: envelope.api_version,
            kind: envelope.kind,
        });
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!(envelope.api_version));
    object.insert("kind".into(), json!(envelope.kind));
    let Value::Object(fields) = message(&name, envelope.raw)? else {
        return Err(ProtobufError::Wire(format!("{name} is not an object")));
    };
    object.extend(fields);
    Ok(Value::Object(object))
}

/// A field's value on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    /// A 32-bit field (no Kubernetes message has one): skipped.
    Fixed32,
    Bytes(&'a [u8]),
}

/// Reads fields off a message's bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .0
                .split_first()
                .ok_or_else(|| ProtobufError::Wire("truncated varint".into()))?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Wire("varint longer than 10 bytes".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if n > self.0.len() {
            return Err(ProtobufError::Wire("truncated field".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// The next field's number and value, or `None` at the end.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtobufError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .map_err(|_| ProtobufError::Wire(format!("field number {} too large", key >> 3)))?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(fixed(self.take(8)?)?)),
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtobufError::Wire("length too large".into()))?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed32
            }
            other => {
                return Err(ProtobufError::Wire(format!(
                    "unsupported wire type {other}"
                )));
            }
        };
        Ok(Some((number, value)))
    }
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], ProtobufError> {
    bytes
        .try_into()
        .map_err(|_| ProtobufError::Wire("truncated fixed-width field".into()))
}

fn text(bytes: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ProtobufError::Wire("a string field is not UTF-8".into()))
}

/// The short name of a message (`ConfigMap` of `k8s.io.api.core.v1.ConfigMap`).
fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// Decode the message `name` from `bytes`: a JSON object, or for the apimachinery types
/// that JSON writes as scalars, that scalar.
fn message(name: &str, bytes: &[u8]) -> Result<Value, ProtobufError> {
    if let Some(special) = special(name, bytes)? {
        return Ok(special);
    }
    let fields = schema()
        .messages
        .get(name)
        .ok_or_else(|| ProtobufError::Wire(format!("no schema for message {name}")))?;
    let mut out = Map::new();
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.field()? {
        let Some(field) = fields.get(&number) else {
            continue;
        };
        field_value(name, field, wire, &mut out)?;
    }
    // A required list or map (no `omitempty` in Go) that is empty is `null` in Go's JSON.
    for field in fields.values() {
        if field.required && (field.repeated || field.type_.starts_with("map_")) {
            out.entry(field.json.clone()).or_insert(Value::Null);
        }
    }
    Ok(Value::Object(out))
}

/// Put one field read off the wire into `out`.
fn field_value(
    parent: &str,
    field: &Field,
    wire: Wire<'_>,
    out: &mut Map<String, Value>,
) -> Result<(), ProtobufError> {
    if let Some(map_type) = field.type_.strip_prefix("map_") {
        let Wire::Bytes(entry) = wire else {
            return Err(mismatch(parent, field));
        };
        let (key, value) = map_entry(map_type, field, entry)?;
        let map = out
            .entry(field.json.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(map) = map {
            map.insert(key, value);
        }
        return Ok(());
    }
    if field.repeated {
        let values = repeated(parent, field, wire)?;
        let list = out
            .entry(field.json.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.extend(values);
        }
        return Ok(());
    }
    let value = scalar_or_message(parent, field, wire)?;
    if field.inline {
        if let Value::Object(inner) = value {
            out.extend(inner);
        }
        return Ok(());
    }
    let zero = matches!(&value, Value::String(s) if s.is_empty())
        || value.as_f64() == Some(0.0)
        || value == Value::Bool(false);
    let pointer = || {
        let key = format!("{}.{}", short(parent), field.json);
        POINTERS.contains(&key.as_str())
    };
    if zero && field.type_ != "message" && !field.required && !pointer() {
        out.remove(&field.json);
        return Ok(());
    }
    out.insert(field.json.clone(), value);
    Ok(())
}

fn mismatch(parent: &str, field: &Field) -> ProtobufError {
    ProtobufError::Wire(format!(
        "{parent}.{}: wire type does not match {}",
        field.json, field.type_
    ))
}

/// The values of one occurrence of a repeated field: one, or several when packed.
fn repeated(parent: &str, field: &Field, wire: Wire<'_>) -> Result<Vec<Value>, ProtobufError> {
    let packable = matches!(field.type_.as_str(), "int32" | "int64" | "bool" | "double");
    match wire {
        Wire::Bytes(packed) if packable => {
            let mut reader = Reader(packed);
            let mut values = Vec::new();
            while !reader.0.is_empty() {
                let wire = if field.type_ == "double" {
                    Wire::Fixed64(u64::from_le_bytes(fixed(reader.take(8)?)?))
                } else {
                    Wire::Varint(reader.varint()?)
                };
                values.push(scalar_or_message(parent, field, wire)?);
            }
            Ok(values)
        }
        wire => Ok(vec![scalar_or_message(parent, field, wire)?]),
    }
}

/// One map entry: key (field 1, a string) and value (field 2).
fn map_entry(
    value_type: &str,
    field: &Field,
    entry: &[u8],
) -> Result<(String, Value), ProtobufError> {
    let mut key = String::new();
    let mut value = match value_type {
        "message" => Value::Object(Map::new()),
        _ => json!(""),
    };
    let mut reader = Reader(entry);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(k)) => key = text(k)?,
            (2, Wire::Bytes(v)) => {
                value = match value_type {
                    "string" => json!(text(v)?),
                    "bytes" => json!(base64::engine::general_purpose::STANDARD.encode(v)),
                    _ => message(field.message.as_deref().unwrap_or(""), v)?,
                }
            }
            _ => {}
        }
    }
    Ok((key, value))
}

/// A single (not repeated) value of `field`.
fn scalar_or_message(parent: &str, field: &Field, wire: Wire<'_>) -> Result<Value, ProtobufError> {
    Ok(match (field.type_.as_str(), wire) {
        ("string", Wire::Bytes(b)) => json!(text(b)?),
        ("bytes", Wire::Bytes(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        ("message", Wire::Bytes(b)) => message(field.message.as_deref().unwrap_or(""), b)?,
        ("bool", Wire::Varint(v)) => json!(v != 0),
        // Two's complement: a negative int32 is sent as a 64-bit varint.
        ("int32", Wire::Varint(v)) => json!(v as i64 as i32),
        ("int64", Wire::Varint(v)) => json!(v as i64),
        ("double", Wire::Fixed64(v)) => json!(f64::from_bits(v)),
        _ => return Err(mismatch(parent, field)),
    })
}

/// The apimachinery messages that JSON writes otherwise than as an object of their
/// fields; `None` for the others.
fn special(name: &str, bytes: &[u8]) -> Result<Option<Value>, ProtobufError> {
    let value = match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => time(bytes, false)?,
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => time(bytes, true)?,
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            json!(string_field(bytes, 1)?.unwrap_or_default())
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => int_or_string(bytes)?,
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "k8s.io.apimachinery.pkg.runtime.RawExtension" => {
            let raw = bytes_field(bytes, 1)?.unwrap_or_default();
            if raw.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(raw)
                    .map_err(|e| ProtobufError::Wire(format!("{name}: {e}")))?
            }
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let mut nanos = 0i64;
            let mut reader = Reader(bytes);
            while let Some((number, wire)) = reader.field()? {
                if let (1, Wire::Varint(v)) = (number, wire) {
                    nanos = v as i64;
                }
            }
            json!(go_duration(nanos))
        }
        _ => return Ok(None),
    };
    Ok(Some(value))
}

fn bytes_field(bytes: &[u8], wanted: u32) -> Result<Option<&[u8]>, ProtobufError> {
    let mut found = None;
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.field()? {
        if let (n, Wire::Bytes(b)) = (number, wire)
            && n == wanted
        {
            found = Some(b);
        }
    }
    Ok(found)
}

fn string_field(bytes: &[u8], wanted: u32) -> Result<Option<String>, ProtobufError> {
    bytes_field(bytes, wanted)?.map(text).transpose()
}

/// `IntOrString`: `type` 0 is `intVal`, 1 is `strVal`.
fn int_or_string(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let (mut kind, mut int, mut string) = (0u64, 0i32, String::new());
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => kind = v,
            (2, Wire::Varint(v)) => int = v as i64 as i32,
            (3, Wire::Bytes(b)) => string = text(b)?,
            _ => {}
        }
    }
    Ok(if kind == 1 { json!(string) } else { json!(int) })
}

/// `Time` (seconds) or `MicroTime` (microseconds) as Go's JSON writes it; the zero time
/// is `null`.
fn time(bytes: &[u8], micro: bool) -> Result<Value, ProtobufError> {
    let (mut seconds, mut nanos) = (0i64, 0u32);
    let mut reader = Reader(bytes);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = u32::try_from(v).unwrap_or(0),
            _ => {}
        }
    }
    if seconds == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let at = chrono::DateTime::from_timestamp(seconds, if micro { nanos } else { 0 })
        .ok_or_else(|| ProtobufError::Wire(format!("time {seconds}s out of range")))?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(json!(at.format(format).to_string()))
}

/// A duration as Go's `time.Duration.String` writes it (`1h2m3s`, `1.5s`, `0s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = match n {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", decimal(n, div));
    }
    let (h, m) = (n / 3_600_000_000_000, (n / 60_000_000_000) % 60);
    let s = decimal(n % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

/// `n / div` with the fraction's trailing zeros left out.
fn decimal(n: u64, div: u64) -> String {
    let (whole, frac) = (n / div, n % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field's key.
    fn key(number: u32, wire: u8) -> Vec<u8> {
        varint(u64::from(number) << 3 | u64::from(wire))
    }

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes(number: u32, b: &[u8]) -> Vec<u8> {
        [key(number, 2), varint(b.len() as u64), b.to_vec()].concat()
    }

    fn int(number: u32, v: u64) -> Vec<u8> {
        [key(number, 0), varint(v)].concat()
    }

    fn envelope_of(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [bytes(1, api_version.as_bytes()), bytes(2, kind.as_bytes())].concat();
        [
            MAGIC.to_vec(),
            bytes(1, &type_meta),
            bytes(2, raw),
            bytes(3, b""),
            bytes(4, b""),
        ]
        .concat()
    }

    /// ObjectMeta with a name and the zero fields Go writes.
    fn meta(name: &str) -> Vec<u8> {
        [
            bytes(1, name.as_bytes()),
            bytes(2, b""),
            bytes(3, b""),
            int(7, 0),
            bytes(8, &[]),
        ]
        .concat()
    }

    #[test]
    fn a_secret_decodes_with_base64_data_and_no_zero_fields() {
        let entry = [bytes(1, b"password"), bytes(2, b"s3cr\xff")].concat();
        let raw = [bytes(1, &meta("db")), bytes(2, &entry), bytes(3, b"Opaque")].concat();
        let object = decode(&envelope_of("v1", "Secret", &raw)).expect("decodes");
        assert_eq!(
            object,
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "creationTimestamp": null},
                "data": {"password": "czNjcv8="},
                "type": "Opaque",
            })
        );
    }

    #[test]
    fn int_or_string_quantity_and_time_are_json_scalars() {
        let port = [
            bytes(1, b""),
            bytes(2, b"TCP"),
            int(3, 80),
            bytes(4, &[int(1, 1), int(2, 0), bytes(3, b"http")].concat()),
            int(5, 0),
        ]
        .concat();
        let spec = bytes(1, &port);
        let raw = [bytes(1, &meta("web")), bytes(2, &spec)].concat();
        let object = decode(&envelope_of("v1", "Service", &raw)).expect("decodes");
        assert_eq!(
            object["spec"]["ports"],
            json!([{"protocol": "TCP", "port": 80, "targetPort": "http"}])
        );
        let numeric = bytes(4, &[int(1, 0), int(2, 8080), bytes(3, b"")].concat());
        let object = decode(&envelope_of(
            "v1",
            "Service",
            &bytes(2, &bytes(1, &[int(3, 80), numeric].concat())),
        ))
        .expect("decodes");
        assert_eq!(object["spec"]["ports"][0]["targetPort"], json!(8080));
        assert_eq!(
            time(&[int(1, 1_767_225_600), int(2, 123_456_789)].concat(), true).expect("time"),
            json!("2026-01-01T00:00:00.123456Z")
        );
        assert_eq!(
            message(
                "k8s.io.apimachinery.pkg.api.resource.Quantity",
                &bytes(1, b"500m")
            )
            .expect("quantity"),
            json!("500m")
        );
    }

    #[test]
    fn zero_pointers_stay_and_zero_values_go() {
        // DeploymentSpec: replicas 0 (a pointer), minReadySeconds 0 (a value), paused false.
        let spec = [int(1, 0), int(5, 0), int(7, 0)].concat();
        let object =
            decode(&envelope_of("apps/v1", "Deployment", &bytes(2, &spec))).expect("decodes");
        assert_eq!(object["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn bodies_that_are_not_served_protobuf_are_refused() {
        assert_eq!(decode(b"{\"kind\":\"Pod\"}"), Err(ProtobufError::NoMagic));
        assert!(matches!(
            decode(&envelope_of("stable.example.com/v1", "CronTab", b"")),
            Err(ProtobufError::UnknownKind { .. })
        ));
        let truncated = envelope_of("v1", "ConfigMap", &[0x0a, 0x05, b'a']);
        assert!(matches!(decode(&truncated), Err(ProtobufError::Wire(_))));
    }

    #[test]
    fn delete_options_keep_a_zero_grace_period() {
        // gracePeriodSeconds 0 (a pointer: "now"), propagationPolicy "Foreground".
        let raw = [int(1, 0), bytes(4, b"Foreground")].concat();
        let options = decode(&envelope_of("v1", "DeleteOptions", &raw)).expect("decodes");
        assert_eq!(options["gracePeriodSeconds"], json!(0));
        assert_eq!(options["propagationPolicy"], json!("Foreground"));
        assert!(decodes("meta.k8s.io/v1", "DeleteOptions"));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(3_723_000_000_000), "1h2m3s");
        assert_eq!(go_duration(90_000_000_000), "1m30s");
        assert_eq!(go_duration(2_000_000), "2ms");
    }

    #[test]
    fn every_message_the_schema_names_is_in_it() {
        let schema = schema();
        assert!(schema.messages.len() > 200, "{}", schema.messages.len());
        for (name, fields) in &schema.messages {
            for field in fields.values() {
                if let Some(target) = &field.message {
                    assert!(
                        schema.messages.contains_key(target),
                        "{name}.{} names {target}",
                        field.json
                    );
                }
            }
        }
    }
}
