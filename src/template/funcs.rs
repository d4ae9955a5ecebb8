//! The functions a Stage template can call: KWOK's (`Now`, `Quote`, `YAML`, `NodeIPWith`,
//! ...), then all of sprig's ([`super::sprig`]).
//!
//! Each function checks its arguments the way Go's `text/template` checks a typed Go
//! function (`wrong number of args for Quote: want 1 got 0`,
//! `wrong type for value; expected string; got int`), and returns an error, never panics.
//! Non-deterministic functions go through the [`TemplateEnv`].

use std::sync::Arc;

use gotmpl::{FuncMap, TemplateError as GoError, Value, ValueFunc};

use super::env::{PodIpRequest, TemplateEnv};
use super::value::{from_json, go_json, go_sprint_float, to_json};
use crate::go::go_quote;

/// A function that reads the env, after its arity was checked.
type EnvFn = fn(&dyn TemplateEnv, &[Value]) -> Result<Value, GoError>;

/// KWOK's functions that read the env: name, arity, body.
const ENV_FUNCS: &[(&str, usize, EnvFn)] = &[
    ("Now", 0, |e, _| Ok(string(e.now()))),
    ("StartTime", 0, |e, _| Ok(string(e.start_time()))),
    ("Version", 0, |e, _| Ok(string(e.version()))),
    ("NodeName", 0, |e, _| Ok(string(e.node_name()))),
    ("NodePort", 0, |e, _| Ok(from_json(&e.node_port()))),
    ("NodeIP", 0, |e, _| {
        e.node_ip()
            .map(string)
            .map_err(|m| call_error("NodeIP", &m))
    }),
    ("PodIP", 0, |e, _| {
        e.pod_ip().map(string).map_err(|m| call_error("PodIP", &m))
    }),
    ("NodeIPWith", 1, |e, args| {
        e.node_ip_with(str_arg(&args[0])?)
            .map(string)
            .map_err(|m| call_error("NodeIPWith", &m))
    }),
    ("NodeIPsWith", 1, |e, args| {
        e.node_ips_with(str_arg(&args[0])?)
            .map(strings)
            .map_err(|m| call_error("NodeIPsWith", &m))
    }),
    ("PodIPWith", 5, |e, args| {
        e.pod_ip_with(&pod_args(args)?)
            .map(string)
            .map_err(|m| call_error("PodIPWith", &m))
    }),
    ("PodIPsWith", 5, |e, args| {
        e.pod_ips_with(&pod_args(args)?)
            .map(strings)
            .map_err(|m| call_error("PodIPsWith", &m))
    }),
];

/// All template functions, reading `env` for anything non-deterministic.
pub(crate) fn func_map(env: &Arc<dyn TemplateEnv>) -> FuncMap {
    let mut m = FuncMap::new();
    let mut add = |name: &str, f: ValueFunc| {
        m.insert(name.to_owned(), f);
    };
    for &(name, arity, body) in ENV_FUNCS {
        let env = env.clone();
        add(
            name,
            Arc::new(move |args| {
                want(name, args, arity)?;
                body(env.as_ref(), args)
            }),
        );
    }

    // Deterministic KWOK functions.
    add(
        "Quote",
        Arc::new(|args| {
            want("Quote", args, 1)?;
            Ok(string(quote(&args[0])))
        }),
    );
    add("YAML", Arc::new(yaml));
    let conditions = node_conditions();
    add(
        "NodeConditions",
        Arc::new(move |args| {
            want("NodeConditions", args, 0)?;
            Ok(conditions.clone())
        }),
    );

    super::sprig::register(&mut m, env);
    m
}

fn string(s: impl Into<Arc<str>>) -> Value {
    Value::String(s.into())
}

fn strings(items: Vec<String>) -> Value {
    Value::List(items.into_iter().map(string).collect())
}

/// Go's error for a function that returned an error.
fn call_error(name: &str, message: &str) -> GoError {
    GoError::Exec(format!("error calling {name}: {message}"))
}

fn want(name: &str, args: &[Value], n: usize) -> Result<(), GoError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(GoError::Exec(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        )))
    }
}

fn at_least(name: &str, args: &[Value], n: usize) -> Result<(), GoError> {
    if args.len() >= n {
        Ok(())
    } else {
        Err(GoError::Exec(format!(
            "wrong number of args for {name}: want at least {n} got {}",
            args.len()
        )))
    }
}

/// Go's type name for a template value, as its argument checks print it.
pub(crate) fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Uint(_) => "uint64",
        Value::Float(_) => "float64",
        Value::String(_) => "string",
        Value::List(_) => "[]interface {}",
        Value::Map(_) => "map[string]interface {}",
        Value::Function(_) => "func",
    }
}

fn wrong_type(expected: &str, got: &Value) -> GoError {
    match got {
        Value::Nil => GoError::Exec(format!("invalid value; expected {expected}")),
        _ => GoError::Exec(format!(
            "wrong type for value; expected {expected}; got {}",
            go_type(got)
        )),
    }
}

fn str_arg(value: &Value) -> Result<&str, GoError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(wrong_type("string", other)),
    }
}

fn bool_arg(value: &Value) -> Result<bool, GoError> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(wrong_type("bool", other)),
    }
}

fn int_arg(value: &Value) -> Result<i64, GoError> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => i64::try_from(*u).map_err(|_| wrong_type("int", value)),
        other => Err(wrong_type("int", other)),
    }
}

/// `PodIPWith`'s five arguments (the arity is checked already).
fn pod_args(args: &[Value]) -> Result<PodIpRequest<'_>, GoError> {
    Ok(PodIpRequest {
        node_name: str_arg(&args[0])?,
        host_network: bool_arg(&args[1])?,
        uid: str_arg(&args[2])?,
        name: str_arg(&args[3])?,
        namespace: str_arg(&args[4])?,
    })
}

/// KWOK's `Quote`: the JSON encoding when it is a JSON string, else that JSON text (or Go's
/// `fmt.Sprint` when JSON fails) quoted with `strconv.Quote`.
fn quote(value: &Value) -> String {
    match go_json(value) {
        Ok(json) if json.starts_with('"') => json,
        Ok(json) => go_quote(&json),
        Err(_) => go_quote(&go_sprint(value)),
    }
}

/// `fmt.Sprint` for the values JSON cannot hold.
fn go_sprint(value: &Value) -> String {
    match value {
        Value::Float(f) => go_sprint_float(*f),
        other => other.to_string(),
    }
}

/// KWOK's `YAML value [indent]`: `sigs.k8s.io/yaml.Marshal(value)`; with exactly one
/// positive indent, every line after a leading newline is padded by `2 × indent` spaces.
fn yaml(args: &[Value]) -> Result<Value, GoError> {
    at_least("YAML", args, 1)?;
    let indents = args[1..]
        .iter()
        .map(int_arg)
        .collect::<Result<Vec<_>, _>>()?;
    let json = to_json(&args[0]).map_err(|m| call_error("YAML", &m))?;
    let mut out = crate::yaml::to_string(&json);
    if let [indent] = indents.as_slice()
        && *indent > 0
    {
        // Bounded before allocating: a Stage's `YAML . 444444444` must not ask for
        // gigabytes of spaces (Go would; kstage reports it as the call's error).
        let width = usize::try_from(*indent).map_or(usize::MAX, |i| i.saturating_mul(2));
        let lines = out.matches('\n').count() + 1;
        let padded = width.saturating_mul(lines).saturating_add(out.len());
        if padded > super::MAX_OUTPUT {
            return Err(call_error(
                "YAML",
                &format!(
                    "indent {indent} makes an output over {} bytes",
                    super::MAX_OUTPUT
                ),
            ));
        }
        let pad = " ".repeat(width);
        out = format!("\n{out}").replace('\n', &format!("\n{pad}"));
    }
    Ok(string(out))
}

/// KWOK's default node conditions, as JSON sees a `[]corev1.NodeCondition` (zero times are
/// `null`).
fn node_conditions() -> Value {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({
            "lastHeartbeatTime": null,
            "lastTransitionTime": null,
            "message": message,
            "reason": reason,
            "status": status,
            "type": type_,
        })
    };
    from_json(&serde_json::Value::Array(vec![
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        condition(
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "RouteController created a route",
        ),
    ]))
}
