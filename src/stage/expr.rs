//! The jq and CEL programs of a Stage: compiled once when the Stage loads, then evaluated
//! against many objects.
//!
//! jq runs on [jaq](https://github.com/01mf02/jaq) (KWOK runs gojq). Programs made only of
//! paths (`.a.b`, `.a["k"]`, `.a[0]`, `.a.[]`, `.a?`) piped into `select(PATH == LITERAL)` or
//! `select(PATH != LITERAL)` with a string, boolean or null literal, which is the shape of
//! every jq expression in KWOK's own Stages, are evaluated directly on the
//! [`serde_json::Value`] with jaq's semantics, so matching an object converts nothing;
//! every other program runs on jaq. `.a.[]` (a `.` before `[]`, as KWOK's Stages write it)
//! is plain jaq syntax and needs no rewriting.
//!
//! CEL runs on the [`cel`] crate with its standard library; the object is bound to `self`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde::Deserialize as _;
use serde_json::Value;

use super::FieldError;
use super::v1alpha1::ExpressionFrom;

/// The most outputs a jq program may give for one object; more counts as a runtime error
/// (it guards against `repeat`, `range(1e9)` and the like).
pub const MAX_OUTPUTS: usize = 10_000;

/// Why a jq program gave no usable output for an object. KWOK treats every one of these as
/// "no value": the outputs given before the error are dropped too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JqError {
    /// A key step (`.a`) met a value that is neither an object nor null.
    #[error("cannot index {0} with a key")]
    Key(&'static str),
    /// An index step (`.[0]`) met a value that is neither an array, an object nor null.
    #[error("cannot index {0} with a number")]
    Index(&'static str),
    /// `.[]` met a value that is neither an array nor an object.
    #[error("cannot iterate over {0}")]
    Iterate(&'static str),
    /// jaq reported an error (`error("x")`, a type error, ...).
    #[error("{0}")]
    Runtime(String),
    /// The program gave more than [`MAX_OUTPUTS`] outputs.
    #[error("more than {MAX_OUTPUTS} outputs")]
    TooManyOutputs,
    /// The program overran its budget (see [`sandbox`](super::sandbox)), or was disabled
    /// after overrunning it [`MAX_OVERRUNS`] times.
    #[error("{0}")]
    Budget(String),
}

/// After this many overruns of its budget a program is not evaluated again (until its
/// Stage is loaded again): each overrun costs up to the whole budget.
pub const MAX_OVERRUNS: u32 = 3;

/// The longest expression source accepted, in bytes.
pub const MAX_SOURCE_LEN: usize = 16 * 1024;

/// The deepest nesting of brackets accepted in an expression source: the parsers recurse
/// per level, and a deep enough source would overflow the stack while compiling.
pub const MAX_NESTING: usize = 64;

/// Refuse sources the parsers could not take safely: too long, or nested too deep
/// (brackets inside string literals not counted).
fn check_source(src: &str) -> Result<(), String> {
    if src.len() > MAX_SOURCE_LEN {
        return Err(format!(
            "the expression is {} bytes long; at most {MAX_SOURCE_LEN} are accepted",
            src.len()
        ));
    }
    let (mut depth, mut deepest, mut quote, mut escaped) = (0usize, 0usize, None, false);
    for c in src.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    if deepest > MAX_NESTING {
        return Err(format!(
            "brackets nest {deepest} deep; at most {MAX_NESTING} levels are accepted"
        ));
    }
    Ok(())
}

thread_local! {
    /// The Stage whose programs are being compiled on this thread (see [`in_stage`]).
    static STAGE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    /// The field of that Stage being compiled (see [`at_field`]).
    static FIELD: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Run `compile` with the programs it compiles naming Stage `name` in what they report.
pub fn in_stage<T>(name: &str, compile: impl FnOnce() -> T) -> T {
    let outer = STAGE.with(|s| s.replace(Some(name.to_owned())));
    let out = compile();
    STAGE.with(|s| *s.borrow_mut() = outer);
    out
}

/// Run `compile` with the programs it compiles naming field `path` (of the Stage of
/// [`in_stage`]) in what they report.
pub fn at_field<T>(path: &str, compile: impl FnOnce() -> T) -> T {
    let outer = FIELD.with(|f| f.replace(Some(path.to_owned())));
    let out = compile();
    FIELD.with(|f| *f.borrow_mut() = outer);
    out
}

/// The stack the parsers get: they recurse per nesting level and per operator of a chain
/// (`.a | .a | ...`), and the longest source accepted needs more than the 2 MiB of a
/// tokio worker thread. Only the pages used are committed.
const COMPILE_STACK: usize = 64 << 20;

/// Run `compile` on a thread of its own with a [`COMPILE_STACK`] stack (in the sandbox's
/// child, on its main thread: a stack overflow there is contained, and its memory limit
/// leaves no room for a large stack).
fn on_compile_stack<T: Send>(
    compile: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    if super::sandbox::is_child() {
        return compile();
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("kstage-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn_scoped(scope, compile)
            .map_err(|e| format!("cannot start the compiling thread: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the compiler panicked".to_owned()))
    })
}

/// Counts a program's overruns and names it in what it reports.
#[derive(Debug)]
struct Overruns {
    count: std::sync::atomic::AtomicU32,
    /// "jq expression ".a" of Stage "s"".
    name: String,
}

impl Overruns {
    fn new(language: &str, source: &str) -> Self {
        let stage = STAGE.with(|s| s.borrow().clone());
        let field = FIELD.with(|f| f.borrow().clone());
        // Long programs are named by their start.
        let source = match source.char_indices().nth(80) {
            Some((end, _)) => format!("{}…", &source[..end]),
            None => source.to_owned(),
        };
        let mut name = format!("{language} expression {source:?}");
        if let Some(field) = field {
            name.push_str(&format!(" ({field})"));
        }
        if let Some(stage) = stage {
            name.push_str(&format!(" of Stage {stage:?}"));
        }
        Self {
            count: Default::default(),
            name,
        }
    }

    /// The error for a program that overran its budget too often already.
    fn refused(&self) -> Option<String> {
        let n = self.count.load(std::sync::atomic::Ordering::Relaxed);
        (n >= MAX_OVERRUNS)
            .then(|| format!("{} is disabled: it overran its budget {n} times", self.name))
    }

    /// Count an overrun and report it (a warning; the last one says the program is now
    /// disabled).
    fn record(&self, overrun: &super::sandbox::Overrun) -> String {
        let n = self
            .count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let message = format!("{} {overrun}", self.name);
        if n >= MAX_OVERRUNS {
            tracing::warn!(
                "{message}; disabled after {n} overruns: it matches nothing and gives no value until its Stage is loaded again"
            );
        } else {
            tracing::warn!("{message}; the object is not matched by it");
        }
        message
    }
}

/// The outputs of a jq program for one object, borrowed from the object where possible.
pub type JqOutputs<'a> = Vec<Cow<'a, Value>>;

type JaqFilter = jaq_core::Filter<data::JustLut<Val>>;

/// A compiled jq program.
pub struct Jq {
    source: String,
    /// The same program for the native evaluator, when it is simple enough.
    native: Option<native::Pipeline>,
    filter: Box<JaqFilter>,
    overruns: Overruns,
}

impl fmt::Debug for Jq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jq")
            .field("source", &self.source)
            .field("native", &self.native.is_some())
            .finish()
    }
}

impl Jq {
    /// Parses and compiles `src`; the error names what jaq expected and where.
    pub fn compile(src: &str) -> Result<Jq, String> {
        check_source(src).map_err(|e| format!("jq: {e}"))?;
        let (filter, native) = on_compile_stack(|| Ok((compile_jaq(src)?, native::lower(src))))?;
        Ok(Jq {
            source: src.to_owned(),
            native,
            filter: Box::new(filter),
            overruns: Overruns::new("jq", src),
        })
    }

    /// Runs the program on `input` and collects its outputs. `Err` is a runtime error, which
    /// selectors and values treat as "no value".
    pub fn run(&self, input: &Value) -> Result<Vec<Value>, String> {
        self.outputs(input)
            .map(|outputs| outputs.into_iter().map(Cow::into_owned).collect())
            .map_err(|e| e.to_string())
    }

    /// Runs the program on `input`, borrowing outputs from it where possible.
    ///
    /// A program the native evaluator does not run is evaluated in the
    /// [`sandbox`](super::sandbox) when one is installed, within its limits.
    #[inline]
    pub fn outputs<'a>(&self, input: &'a Value) -> Result<JqOutputs<'a>, JqError> {
        match &self.native {
            Some(pipeline) => pipeline.run(input),
            None => self.outputs_on_jaq(input),
        }
    }

    /// A program the native evaluator does not run: in the sandbox when there is one.
    #[inline(never)]
    fn outputs_on_jaq<'a>(&self, input: &'a Value) -> Result<JqOutputs<'a>, JqError> {
        if !super::sandbox::installed() {
            return self.run_jaq(input);
        }
        if let Some(refused) = self.overruns.refused() {
            return Err(JqError::Budget(refused));
        }
        let request = super::sandbox::Request::Jq {
            source: Cow::Borrowed(&self.source),
            input: Cow::Borrowed(input),
        };
        match super::sandbox::eval(&request) {
            None => self.run_jaq(input),
            Some(Ok(super::sandbox::Reply::Outputs(outputs))) => {
                Ok(outputs.into_iter().map(Cow::Owned).collect())
            }
            Some(Ok(super::sandbox::Reply::Error(e))) => Err(JqError::Runtime(e)),
            Some(Ok(other)) => Err(JqError::Runtime(format!("an unexpected answer {other:?}"))),
            Some(Err(overrun)) => Err(JqError::Budget(self.overruns.record(&overrun))),
        }
    }

    /// Runs the program in this process (what the sandbox's child does), owning the
    /// outputs.
    pub fn outputs_here(&self, input: &Value) -> Result<Vec<Value>, JqError> {
        let outputs = match &self.native {
            Some(pipeline) => pipeline.run(input)?,
            None => self.run_jaq(input)?,
        };
        Ok(outputs.into_iter().map(Cow::into_owned).collect())
    }

    /// The program as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the program runs on the native evaluator rather than on jaq.
    pub fn is_native(&self) -> bool {
        self.native.is_some()
    }

    /// The object keys the program reads, as far as they are plain keys (`.status.phase`:
    /// `status`, `phase`; `.spec.containers[0].image`: `spec`, `containers`); `None` when
    /// the program is more than one path.
    pub fn read_keys(&self) -> Option<Vec<String>> {
        self.native.as_ref()?.key_prefix()
    }

    fn run_jaq<'a>(&self, input: &Value) -> Result<JqOutputs<'a>, JqError> {
        let input = Val::deserialize(input).map_err(|e| JqError::Runtime(e.to_string()))?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut outputs = Vec::new();
        for output in self.filter.id.run((ctx, input)).map(unwrap_valr) {
            let output = output.map_err(|e| JqError::Runtime(e.to_string()))?;
            if outputs.len() == MAX_OUTPUTS {
                return Err(JqError::TooManyOutputs);
            }
            outputs.push(Cow::Owned(val_to_json(output)));
        }
        Ok(outputs)
    }
}

/// Loads and compiles `src` with jaq's core, standard and JSON definitions.
fn compile_jaq(src: &str) -> Result<JaqFilter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs());
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(
            &arena,
            File {
                code: src,
                path: (),
            },
        )
        .map_err(|errors| load_errors(src, errors))?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| {
            let undefined = errors.into_iter().flat_map(|(_, e)| e);
            let messages: Vec<String> = undefined
                .map(|(name, kind)| {
                    format!(
                        "undefined {} {name} at {}",
                        kind.as_str(),
                        offset(src, name)
                    )
                })
                .collect();
            messages.join("; ")
        })
}

fn load_errors(src: &str, errors: jaq_core::load::Errors<&str, ()>) -> String {
    use jaq_core::load::Error;
    let mut messages = Vec::new();
    for (_, error) in errors {
        match error {
            Error::Io(io) => {
                messages.extend(io.into_iter().map(|(path, e)| format!("{path}: {e}")))
            }
            Error::Lex(lex) => messages.extend(lex.into_iter().map(|(expect, at)| {
                format!("expected {} at {}", expect.as_str(), offset(src, at))
            })),
            Error::Parse(parse) => messages.extend(parse.into_iter().map(|(expect, at)| {
                format!("expected {} at {}", expect.as_str(), offset(src, at))
            })),
        }
    }
    format!("jq: {}", messages.join("; "))
}

/// The byte offset of `part` within `whole` ("end" when it is not a slice of it).
fn offset(whole: &str, part: &str) -> String {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize);
    match start {
        Some(start) if start < whole.len() => format!("offset {start}"),
        _ => "end of input".to_owned(),
    }
}

/// Converts a jaq value to JSON: byte strings become (lossy) text, non-string object keys
/// their JSON text, and non-finite numbers null (as jq prints them).
fn val_to_json(v: Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(b),
        Val::Num(n) => num_to_json(&n),
        Val::TStr(b) | Val::BStr(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
        Val::Arr(a) => Value::Array(a.iter().cloned().map(val_to_json).collect()),
        Val::Obj(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let key = match val_to_json(k.clone()) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, val_to_json(v.clone()))
                })
                .collect(),
        ),
    }
}

fn num_to_json(n: &jaq_json::Num) -> Value {
    use jaq_json::Num;
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        // Big integers and decimal literals: through their text.
        other => {
            let text = other.to_string();
            if let Ok(i) = text.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = text.parse::<u64>() {
                Value::from(u)
            } else {
                text.parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
    }
}

/// The evaluator for simple jq programs: paths and `select(PATH ==/!= LITERAL)`, run on
/// `serde_json::Value` with jaq's semantics (the tests check it against jaq).
mod native {
    use std::borrow::Cow;

    use jaq_core::load::lex::StrPart;
    use jaq_core::load::parse::{BinaryOp, Term};
    use jaq_core::ops::Cmp;
    use jaq_core::path::{Opt, Part as JaqPart};
    use serde_json::Value;

    use super::{JqError, JqOutputs, MAX_OUTPUTS};

    static NULL: Value = Value::Null;

    /// Stages joined by `|`.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) struct Pipeline(Vec<Stage>);

    #[derive(Debug, Clone, PartialEq)]
    enum Stage {
        /// `.a.b[0][]`
        Path(Vec<Part>),
        /// `select(PATH == LITERAL)` (`equal`) or `select(PATH != LITERAL)`.
        Select {
            path: Vec<Part>,
            literal: Literal,
            equal: bool,
        },
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Part {
        step: Step,
        /// `?`: an error at this step gives no output instead.
        optional: bool,
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Step {
        Key(String),
        Index(isize),
        Iterate,
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Literal {
        Null,
        Bool(bool),
        Str(String),
    }

    impl Literal {
        fn equals(&self, v: &Value) -> bool {
            match (self, v) {
                (Literal::Null, Value::Null) => true,
                (Literal::Bool(a), Value::Bool(b)) => a == b,
                (Literal::Str(a), Value::String(b)) => a == b,
                _ => false,
            }
        }
    }

    type Emit<'e, 'a> = &'e mut dyn FnMut(&'a Value) -> Result<(), JqError>;

    impl Pipeline {
        /// The leading plain keys of a program that is one path.
        pub(super) fn key_prefix(&self) -> Option<Vec<String>> {
            let [Stage::Path(parts)] = self.0.as_slice() else {
                return None;
            };
            Some(
                parts
                    .iter()
                    .map_while(|part| match &part.step {
                        Step::Key(key) => Some(key.clone()),
                        Step::Index(_) | Step::Iterate => None,
                    })
                    .collect(),
            )
        }

        pub(super) fn run<'a>(&self, input: &'a Value) -> Result<JqOutputs<'a>, JqError> {
            let mut outputs = Vec::new();
            stages(&self.0, input, &mut |v| {
                if outputs.len() == MAX_OUTPUTS {
                    return Err(JqError::TooManyOutputs);
                }
                outputs.push(Cow::Borrowed(v));
                Ok(())
            })?;
            Ok(outputs)
        }
    }

    fn stages<'a>(stages: &[Stage], v: &'a Value, emit: Emit<'_, 'a>) -> Result<(), JqError> {
        let Some((first, rest)) = stages.split_first() else {
            return emit(v);
        };
        match first {
            Stage::Path(parts) => path(parts, v, &mut |x| self::stages(rest, x, emit)),
            Stage::Select {
                path: parts,
                literal,
                equal,
            } => {
                // `select(f)` gives its input once per true output of `f`.
                let mut hits = 0usize;
                path(parts, v, &mut |x| {
                    hits += usize::from(literal.equals(x) == *equal);
                    Ok(())
                })?;
                (0..hits).try_for_each(|_| self::stages(rest, v, emit))
            }
        }
    }

    fn path<'a>(parts: &[Part], v: &'a Value, emit: Emit<'_, 'a>) -> Result<(), JqError> {
        let Some((first, rest)) = parts.split_first() else {
            return emit(v);
        };
        let fail = |e: JqError| if first.optional { Ok(()) } else { Err(e) };
        match (&first.step, v) {
            (Step::Key(_), Value::Null) => path(rest, &NULL, emit),
            (Step::Key(k), Value::Object(map)) => path(rest, map.get(k).unwrap_or(&NULL), emit),
            (Step::Key(_), _) => fail(JqError::Key(type_name(v))),
            // jaq gives null for a number index on an object (gojq fails).
            (Step::Index(_), Value::Null | Value::Object(_)) => path(rest, &NULL, emit),
            (Step::Index(i), Value::Array(items)) => {
                let at = if *i >= 0 {
                    Some(i.unsigned_abs())
                } else {
                    items.len().checked_sub(i.unsigned_abs())
                };
                let item = at.and_then(|at| items.get(at)).unwrap_or(&NULL);
                path(rest, item, emit)
            }
            (Step::Index(_), _) => fail(JqError::Index(type_name(v))),
            (Step::Iterate, Value::Array(items)) => {
                items.iter().try_for_each(|item| path(rest, item, emit))
            }
            (Step::Iterate, Value::Object(map)) => {
                map.values().try_for_each(|item| path(rest, item, emit))
            }
            (Step::Iterate, _) => fail(JqError::Iterate(type_name(v))),
        }
    }

    pub(super) fn type_name(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// The native form of `src`, if it has one.
    pub(super) fn lower(src: &str) -> Option<Pipeline> {
        let term = jaq_core::load::parse(src, |p| p.term())?;
        let mut stages = Vec::new();
        lower_term(&term, &mut stages)?;
        // The evaluator recurses per stage and per step: longer programs run on jaq, in
        // the sandbox.
        let steps = stages.iter().map(|stage| match stage {
            Stage::Path(path) | Stage::Select { path, .. } => path.len(),
        });
        if stages.len() > MAX_STAGES || steps.max().unwrap_or(0) > MAX_STEPS {
            return None;
        }
        Some(Pipeline(stages))
    }

    /// The most `|` stages, and steps in one path, a natively run program has.
    const MAX_STAGES: usize = 32;
    const MAX_STEPS: usize = 64;

    fn lower_term(term: &Term<&str>, stages: &mut Vec<Stage>) -> Option<()> {
        match term {
            Term::Id => Some(()),
            Term::Path(..) => {
                stages.push(Stage::Path(lower_path(term)?));
                Some(())
            }
            Term::BinOp(l, BinaryOp::Pipe(None), r) => {
                lower_term(l, stages)?;
                lower_term(r, stages)
            }
            Term::Call(name, args) if *name == "select" && args.len() == 1 => {
                stages.push(lower_select(&args[0])?);
                Some(())
            }
            _ => None,
        }
    }

    fn lower_select(cond: &Term<&str>) -> Option<Stage> {
        let Term::BinOp(l, BinaryOp::Cmp(cmp @ (Cmp::Eq | Cmp::Ne)), r) = cond else {
            return None;
        };
        let equal = matches!(cmp, Cmp::Eq);
        let (path, literal) = match (lower_path(l), lower_literal(r)) {
            (Some(path), Some(literal)) => (path, literal),
            _ => (lower_path(r)?, lower_literal(l)?),
        };
        Some(Stage::Select {
            path,
            literal,
            equal,
        })
    }

    fn lower_path(term: &Term<&str>) -> Option<Vec<Part>> {
        match term {
            Term::Id => Some(Vec::new()),
            Term::Path(base, jaq_path) => {
                let mut parts = lower_path(base)?;
                for (part, opt) in &jaq_path.0 {
                    let step = match part {
                        JaqPart::Index(Term::Str(None, s)) => Step::Key(string(s)?),
                        JaqPart::Index(index) => Step::Index(integer(index)?),
                        JaqPart::Range(None, None) => Step::Iterate,
                        JaqPart::Range(..) => return None,
                    };
                    let optional = matches!(opt, Opt::Optional);
                    parts.push(Part { step, optional });
                }
                Some(parts)
            }
            _ => None,
        }
    }

    fn lower_literal(term: &Term<&str>) -> Option<Literal> {
        match term {
            Term::Str(None, s) => Some(Literal::Str(string(s)?)),
            Term::Call(name, args) if args.is_empty() => match *name {
                "null" => Some(Literal::Null),
                "true" => Some(Literal::Bool(true)),
                "false" => Some(Literal::Bool(false)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A string literal without interpolation.
    fn string(parts: &[StrPart<&str, Term<&str>>]) -> Option<String> {
        let mut out = String::new();
        for part in parts {
            match part {
                StrPart::Str(s) => out.push_str(s),
                StrPart::Char(c) => out.push(*c),
                StrPart::Term(_) => return None,
            }
        }
        Some(out)
    }

    /// An integer literal, possibly negated.
    fn integer(term: &Term<&str>) -> Option<isize> {
        match term {
            Term::Num(n) => n.parse().ok(),
            Term::Neg(inner) => integer(inner)?.checked_neg(),
            _ => None,
        }
    }
}

/// A compiled CEL program; `self` is the object.
pub struct Cel {
    source: String,
    program: cel::Program,
    /// It has comprehensions (`map`, `filter`, `all`, `exists`, `exists_one`): its cost can
    /// grow as the product of list sizes, so it is evaluated in the sandbox.
    unbounded: bool,
    overruns: Overruns,
}

impl fmt::Debug for Cel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cel").field("source", &self.source).finish()
    }
}

/// The CEL standard environment, built once.
fn cel_env() -> &'static Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(cel::Env::stdlib()))
}

/// An object converted for CEL once, to evaluate several programs against it.
#[derive(Debug, Clone)]
pub struct CelObject(cel::Value);

impl CelObject {
    /// Converts `obj`: integers fitting `i64` become `int`, larger ones `uint`, others
    /// `double`.
    pub fn new(obj: &Value) -> Self {
        Self(json_to_cel(obj))
    }
}

impl Cel {
    /// Parses `src`; the error shows where.
    pub fn compile(src: &str) -> Result<Cel, String> {
        check_source(src).map_err(|e| format!("cel: {e}"))?;
        let program = on_compile_stack(|| cel_env().compile(src).map_err(|e| format!("cel: {e}")))?;
        Ok(Cel {
            source: src.to_owned(),
            unbounded: has_comprehension(&program.expression().expr),
            program,
            overruns: Overruns::new("cel", src),
        })
    }

    /// Evaluates in this process (what the sandbox's child does).
    pub fn reply_here(&self, input: &Value) -> super::sandbox::Reply {
        use super::sandbox::Reply;
        match self.execute(&CelObject::new(input)) {
            Ok(cel::Value::Duration(d)) => Reply::Duration(d.num_nanoseconds().unwrap_or(i64::MAX)),
            Ok(cel::Value::Timestamp(t)) => Reply::Timestamp(t.to_rfc3339()),
            Ok(value) => match cel_to_json(&value) {
                Ok(json) => Reply::Value(json),
                Err(e) => Reply::Error(e),
            },
            Err(e) => Reply::Error(e),
        }
    }

    #[inline]
    fn execute(&self, obj: &CelObject) -> Result<cel::Value, String> {
        let mut ctx = cel::Context::with_env(Arc::clone(cel_env()));
        ctx.add_variable_from_value("self", obj.0.clone());
        self.program.execute(&ctx).map_err(|e| e.to_string())
    }

    /// Evaluates the program with `self` bound to `obj`, and converts the result to JSON
    /// (durations become Go duration text such as `1m30s`, timestamps RFC 3339 text).
    pub fn eval(&self, obj: &Value) -> Result<Value, String> {
        self.eval_object(&CelObject::new(obj))
            .and_then(|v| cel_to_json(&v))
    }

    /// Evaluates the program against an object converted once, giving the CEL value.
    ///
    /// A program with comprehensions is evaluated in the [`sandbox`](super::sandbox)
    /// when one is installed, within its limits.
    #[inline]
    pub fn eval_object(&self, obj: &CelObject) -> Result<cel::Value, String> {
        if self.unbounded {
            self.eval_in_sandbox(obj)
        } else {
            self.execute(obj)
        }
    }

    /// A program with comprehensions: in the sandbox when there is one.
    #[inline(never)]
    fn eval_in_sandbox(&self, obj: &CelObject) -> Result<cel::Value, String> {
        if !super::sandbox::installed() {
            return self.execute(obj);
        }
        if let Some(refused) = self.overruns.refused() {
            return Err(refused);
        }
        let request = super::sandbox::Request::Cel {
            source: Cow::Borrowed(&self.source),
            input: Cow::Owned(cel_to_json(&obj.0)?),
        };
        use super::sandbox::Reply;
        match super::sandbox::eval(&request) {
            None => self.execute(obj),
            Some(Ok(Reply::Value(v))) => Ok(json_to_cel(&v)),
            Some(Ok(Reply::Duration(ns))) => {
                Ok(cel::Value::Duration(chrono::Duration::nanoseconds(ns)))
            }
            Some(Ok(Reply::Timestamp(t))) => chrono::DateTime::parse_from_rfc3339(&t)
                .map(cel::Value::Timestamp)
                .map_err(|e| e.to_string()),
            Some(Ok(Reply::Error(e))) => Err(e),
            Some(Ok(other)) => Err(format!("an unexpected answer {other:?}")),
            Some(Err(overrun)) => Err(self.overruns.record(&overrun)),
        }
    }

    /// The program as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Whether `e` has a comprehension anywhere.
fn has_comprehension(e: &cel::common::ast::Expr) -> bool {
    use cel::common::ast::Expr;
    match e {
        Expr::Comprehension(_) => true,
        Expr::Call(call) => {
            call.target
                .as_deref()
                .is_some_and(|t| has_comprehension(&t.expr))
                || call.args.iter().any(|a| has_comprehension(&a.expr))
        }
        Expr::List(list) => list.elements.iter().any(|x| has_comprehension(&x.expr)),
        Expr::Map(map) => map.entries.iter().any(|entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(m) => {
                has_comprehension(&m.key.expr) || has_comprehension(&m.value.expr)
            }
            cel::common::ast::EntryExpr::StructField(f) => has_comprehension(&f.value.expr),
        }),
        Expr::Select(select) => has_comprehension(&select.operand.expr),
        Expr::Struct(st) => st.entries.iter().any(|entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(m) => {
                has_comprehension(&m.key.expr) || has_comprehension(&m.value.expr)
            }
            cel::common::ast::EntryExpr::StructField(f) => has_comprehension(&f.value.expr),
        }),
        _ => false,
    }
}

fn json_to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            (None, None) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<cel::objects::Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (cel::objects::Key::from(k.as_str()), json_to_cel(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

fn cel_to_json(v: &cel::Value) -> Result<Value, String> {
    use cel::objects::Key;
    Ok(match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        cel::Value::String(s) => Value::String(s.as_str().to_owned()),
        cel::Value::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        cel::Value::List(items) => {
            Value::Array(items.iter().map(cel_to_json).collect::<Result<_, _>>()?)
        }
        cel::Value::Map(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.map.iter() {
                let key = match k {
                    Key::String(s) => s.as_str().to_owned(),
                    Key::Int(i) => i.to_string(),
                    Key::Uint(u) => u.to_string(),
                    Key::Bool(b) => b.to_string(),
                };
                out.insert(key, cel_to_json(v)?);
            }
            Value::Object(out)
        }
        cel::Value::Duration(d) => {
            let ns = d
                .num_nanoseconds()
                .unwrap_or(if *d < chrono::TimeDelta::zero() {
                    i64::MIN
                } else {
                    i64::MAX
                });
            Value::String(crate::go::format_go_duration(ns))
        }
        cel::Value::Timestamp(t) => {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        }
        other => {
            return Err(format!(
                "cel: a {} result has no JSON form",
                other.type_of()
            ));
        }
    })
}

/// An `ExpressionFrom`: the legacy `expressionFrom` jq string, `jq.expression`, or
/// `cel.expression`.
#[derive(Debug)]
pub enum Expression {
    /// A jq program.
    Jq(Jq),
    /// A CEL program.
    Cel(Cel),
}

impl Expression {
    /// Compiles the one expression `from` names; errors point at `path.expressionFrom`,
    /// `path.jq.expression` or `path.cel.expression`. An empty legacy `expressionFrom` counts
    /// as unset (Go's `omitempty`). KWOK silently prefers CEL when several are set; kstage
    /// rejects that as ambiguous.
    pub fn compile(from: &ExpressionFrom, path: &str) -> Result<Expression, FieldError> {
        let legacy = from.expression_from.as_deref().filter(|s| !s.is_empty());
        match (legacy, &from.jq, &from.cel) {
            (Some(src), None, None) => {
                let at = format!("{path}.expressionFrom");
                at_field(&at, || Jq::compile(src))
                    .map(Expression::Jq)
                    .map_err(|e| FieldError::new(at, e))
            }
            (None, Some(jq), None) => {
                let at = format!("{path}.jq.expression");
                at_field(&at, || Jq::compile(&jq.expression))
                    .map(Expression::Jq)
                    .map_err(|e| FieldError::new(at, e))
            }
            (None, None, Some(cel)) => {
                let at = format!("{path}.cel.expression");
                at_field(&at, || Cel::compile(&cel.expression))
                    .map(Expression::Cel)
                    .map_err(|e| FieldError::new(at, e))
            }
            (None, None, None) => Err(FieldError::new(
                path,
                "one of expressionFrom, jq or cel is required",
            )),
            _ => Err(FieldError::new(
                path,
                "only one of expressionFrom, jq and cel may be set",
            )),
        }
    }

    /// The program as written.
    pub fn source(&self) -> &str {
        match self {
            Expression::Jq(jq) => jq.source(),
            Expression::Cel(cel) => cel.source(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jq(src: &str) -> Jq {
        match Jq::compile(src) {
            Ok(jq) => jq,
            Err(e) => panic!("{src}: {e}"),
        }
    }

    /// Runs `src` natively (asserting it is native) and on jaq, asserts both agree, and
    /// returns the outputs.
    fn both(src: &str, input: &Value) -> Result<Vec<Value>, ()> {
        let program = jq(src);
        assert!(program.is_native(), "{src} should run natively");
        let native = program.run(input).map_err(|_| ());
        let jaq = program
            .run_jaq(input)
            .map(|o| o.into_iter().map(Cow::into_owned).collect::<Vec<_>>())
            .map_err(|_| ());
        assert_eq!(native, jaq, "{src} on {input}");
        native
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "a"}, "finalizers": ["f"],
                         "ownerReferences": [{"kind": "Job"}, {"kind": "ReplicaSet"}]},
            "status": {"phase": "Pending",
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "False"}],
                       "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}},
                                             {"state": {"waiting": {"reason": "Failed"}}}]}
        })
    }

    #[test]
    fn jq_and_cel_are_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Jq>();
        send_sync::<Cel>();
        send_sync::<Expression>();
    }

    #[test]
    fn dot_before_brackets_is_accepted() {
        let pod = pod();
        assert_eq!(
            both(".status.containerStatuses.[].state.waiting.reason", &pod),
            Ok(vec![json!("ContainerCreating"), json!("Failed")])
        );
        assert_eq!(
            both(".metadata.ownerReferences.[].kind", &pod),
            both(".metadata.ownerReferences[].kind", &pod)
        );
    }

    #[test]
    fn kwok_query_cases() {
        let pod = pod();
        assert_eq!(both(".status.podIP", &pod), Ok(vec![Value::Null]));
        assert_eq!(
            both(
                ".status.conditions.[] | select( .type == \"Ready\" ) | .status",
                &pod
            ),
            Ok(vec![json!("False")])
        );
        assert_eq!(both(".metadata.finalizers.[]", &pod), Ok(vec![json!("f")]));
        assert_eq!(
            both(".metadata.labels[\"app\"]", &pod),
            Ok(vec![json!("a")])
        );
        // jaq-only programs
        let set = jq(".a = 1");
        assert!(!set.is_native());
        assert_eq!(set.run(&json!({"a": 2})), Ok(vec![json!({"a": 1})]));
        let add = jq(".a += [{b:2}]");
        assert_eq!(
            add.run(&json!({"a": [{"b": 1}]})),
            Ok(vec![json!({"a": [{"b": 1}, {"b": 2}]})])
        );
    }

    #[test]
    fn runtime_errors_drop_every_output() {
        let v = json!({"a": [{"b": "x"}, 5]});
        assert!(both(".a[].b", &v).is_err());
        assert!(both(".a.[]", &json!({})).is_err());
        assert!(both(".a.b", &json!({"a": "s"})).is_err());
        let mixed = jq("1, error(\"boom\"), 2");
        assert_eq!(mixed.run(&json!(null)), Err("\"boom\"".to_owned()));
    }

    #[test]
    fn too_many_outputs_is_an_error() {
        let program = jq("range(20000)");
        assert_eq!(
            program.outputs(&json!(null)).err(),
            Some(JqError::TooManyOutputs)
        );
        let long: Vec<Value> = (0..MAX_OUTPUTS + 1).map(Value::from).collect();
        assert_eq!(
            jq(".[]").outputs(&Value::Array(long)).err(),
            Some(JqError::TooManyOutputs)
        );
    }

    #[test]
    fn native_semantics_match_jaq() {
        let inputs = [
            json!(null),
            json!(1),
            json!("s"),
            json!([1, {"a": null}, [2]]),
            json!({"a": {"b": [1, "x", {"c": true}]}, "l": [{"k": "v", "n": null}, {"k": 1}], "t": true}),
        ];
        let programs = [
            ".",
            ".a",
            ".a.b",
            ".a?",
            ".a.b[0]",
            ".a.b[-1]",
            ".a.b[-9]",
            ".a.b[7]",
            ".[0]",
            ".[-1]",
            ".[]",
            ".[]?",
            ".a[]?.c",
            ".a.b.[]",
            ".a.b[]",
            ".a.b[].c?",
            ".l[] | select(.k == \"v\") | .n",
            ".l[] | select(.k != \"v\")",
            ".l[] | select(.n == null)",
            ".l[] | select(null == .n) | .k",
            ".[] | select(. == true)",
            "select(.t == true) | .t",
            "select(.t == false)",
            ".l | .[] | .k",
            ". | .a",
            ".\"a\".b",
            ".[\"a\"][\"b\"]",
            ".a[\"b\\\"\"]",
        ];
        for program in programs {
            for input in &inputs {
                let _ = both(program, input);
            }
        }
    }

    fn json_strategy() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(Value::from),
            prop_oneof![Just("a"), Just("b"), Just("")].prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("a".to_owned()),
                        Just("b".to_owned()),
                        Just("c".to_owned())
                    ],
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn path_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let step = prop_oneof![
            prop_oneof![
                Just(".a"),
                Just(".b"),
                Just("[\"c\"]"),
                Just(".[]"),
                Just("[]")
            ]
            .prop_map(str::to_owned),
            (-3isize..3).prop_map(|i| format!("[{i}]")),
        ];
        proptest::collection::vec((step, any::<bool>()), 1..4).prop_map(|steps| {
            let path: String = steps
                .into_iter()
                .map(|(s, opt)| if opt { format!("{s}?") } else { s })
                .collect();
            if path.starts_with('[') {
                format!(".{path}")
            } else {
                path
            }
        })
    }

    proptest::proptest! {
        /// The native evaluator agrees with jaq on random paths, selects and inputs.
        #[test]
        fn native_agrees_with_jaq(
            input in json_strategy(),
            first in path_strategy(),
            select in proptest::option::of((path_strategy(), proptest::bool::ANY,
                proptest::sample::select(vec!["\"a\"", "\"\"", "true", "false", "null"]))),
            last in proptest::option::of(path_strategy()),
        ) {
            let mut src = first;
            if let Some((path, equal, literal)) = select {
                let op = if equal { "==" } else { "!=" };
                src = format!("{src} | select({path} {op} {literal})");
            }
            if let Some(last) = last {
                src = format!("{src} | {last}");
            }
            let _ = both(&src, &input);
        }
    }

    #[test]
    fn non_native_programs_fall_back_to_jaq() {
        for src in [
            ".a // \"d\"",
            ".a | length",
            "select(.a == 1)",
            ".a[1:]",
            "[.a]",
            "def f: .a; f",
            ".a as $x | $x",
            "\"\\(.a)\"",
        ] {
            assert!(!jq(src).is_native(), "{src}");
        }
        assert_eq!(
            jq(".metadata.finalizers | length").run(&pod()),
            Ok(vec![json!(1)])
        );
        assert_eq!(
            jq("select(.n == 1.0) | .n").run(&json!({"n": 1})),
            Ok(vec![json!(1)])
        );
    }

    #[test]
    fn compile_errors_say_where() {
        let e = Jq::compile(".a[").err().unwrap_or_default();
        assert!(e.contains("expected"), "{e}");
        let e = Jq::compile(".a | nosuchfn").err().unwrap_or_default();
        assert!(e.contains("undefined filter nosuchfn"), "{e}");
        assert!(Jq::compile("$x").is_err());
    }

    #[test]
    fn jaq_values_convert_to_json() {
        let program = jq("[1, 1.5, \"s\", null, true, {\"k\": [2]}, 100000000000000000000]");
        assert_eq!(
            program.run(&json!(null)),
            Ok(vec![json!([1, 1.5, "s", null, true, {"k": [2]}, 1e20])])
        );
        assert_eq!(jq("nan").run(&json!(null)), Ok(vec![Value::Null]));
    }

    #[test]
    fn cel_evaluates_against_self() {
        let pv = json!({
            "metadata": {"name": "pv"},
            "spec": {"storageClassName": "kwok-volume", "claimRef": {"name": "c"}, "n": 3},
            "status": {"phase": "Pending"}
        });
        let eval = |src: &str| match Cel::compile(src) {
            Ok(cel) => cel.eval(&pv),
            Err(e) => panic!("{src}: {e}"),
        };
        assert_eq!(
            eval("self.spec.storageClassName == 'kwok-volume'"),
            Ok(json!(true))
        );
        assert_eq!(
            eval("!has(self.metadata.deletionTimestamp)"),
            Ok(json!(true))
        );
        assert_eq!(eval("has(self.spec.claimRef.name)"), Ok(json!(true)));
        assert_eq!(
            eval("!(self.status.phase in ['Bound', 'Released', 'Failed'])"),
            Ok(json!(true))
        );
        assert_eq!(eval("self.status.phase != 'Bound'"), Ok(json!(true)));
        assert_eq!(eval("self.spec.n == 3"), Ok(json!(true)));
        assert!(eval("self.spec.volumeName == 'x'").is_err());
        assert!(eval("has(self.spec.volumeName.x)").is_err());
        assert_eq!(eval("duration('1m30s')"), Ok(json!("1m30s")));
        assert_eq!(
            eval("timestamp('2006-01-02T15:04:05Z')"),
            Ok(json!("2006-01-02T15:04:05Z"))
        );
        assert_eq!(eval("self.spec"), Ok(pv["spec"].clone()));
        assert!(Cel::compile("1 +").is_err());
    }

    #[test]
    fn expression_compiles_exactly_one_form() {
        let from = |legacy: Option<&str>, jq: Option<&str>, cel: Option<&str>| ExpressionFrom {
            expression_from: legacy.map(str::to_owned),
            jq: jq.map(|e| super::super::v1alpha1::ExpressionJq {
                expression: e.to_owned(),
            }),
            cel: cel.map(|e| super::super::v1alpha1::ExpressionCel {
                expression: e.to_owned(),
            }),
        };
        let ok = |f: &ExpressionFrom| {
            Expression::compile(f, "spec.weightFrom").map(|e| e.source().to_owned())
        };
        assert_eq!(ok(&from(Some(".a"), None, None)), Ok(".a".to_owned()));
        assert!(matches!(
            Expression::compile(&from(None, Some(".b"), None), "p"),
            Ok(Expression::Jq(_))
        ));
        assert!(matches!(
            Expression::compile(&from(None, None, Some("1")), "p"),
            Ok(Expression::Cel(_))
        ));
        let err = |f: &ExpressionFrom| {
            Expression::compile(f, "spec.weightFrom")
                .err()
                .map(|e| e.path)
        };
        assert_eq!(
            err(&from(Some(".a["), None, None)),
            Some("spec.weightFrom.expressionFrom".to_owned())
        );
        assert_eq!(
            err(&from(None, Some(".a["), None)),
            Some("spec.weightFrom.jq.expression".to_owned())
        );
        assert_eq!(
            err(&from(None, None, Some("1 +"))),
            Some("spec.weightFrom.cel.expression".to_owned())
        );
        assert_eq!(
            err(&from(None, None, None)),
            Some("spec.weightFrom".to_owned())
        );
        assert_eq!(
            err(&from(Some(""), None, None)),
            Some("spec.weightFrom".to_owned())
        );
        assert_eq!(
            err(&from(Some(".a"), None, Some("1"))),
            Some("spec.weightFrom".to_owned())
        );
    }

    #[test]
    fn sources_the_parsers_cannot_take_safely_are_refused() {
        let deep = format!("{}.a{}", "(".repeat(5_000), ")".repeat(5_000));
        for error in [Jq::compile(&deep).err(), Cel::compile(&deep).err()] {
            let error = error.unwrap_or_default();
            assert!(
                error.contains("nest 5000 deep") && error.contains("at most 64"),
                "{error}"
            );
        }
        let long = format!(".a{}", " ".repeat(MAX_SOURCE_LEN));
        let error = Jq::compile(&long).err().unwrap_or_default();
        assert!(error.contains("bytes long"), "{error}");
        // A path program too long for the (recursive) native evaluator runs on jaq.
        let chain = format!("{}.a", ".a | ".repeat(40));
        assert!(!jq(&chain).is_native() && jq(".a | .a").is_native());
        assert_eq!(jq(&chain).run(&json!({"a": null})), Ok(vec![Value::Null]));
        // Brackets inside string literals are text, not nesting.
        let quoted = format!(r#".a == "{}""#, "((([[[{{{".repeat(30));
        assert!(Jq::compile(&quoted).is_ok());
        let quoted = format!("self.a == '{}'", "(\\'(".repeat(40));
        assert!(Cel::compile(&quoted).is_ok(), "{quoted}");
    }

    /// The longest and deepest sources accepted compile on a thread with the stack of a
    /// tokio worker (2 MiB), where Stages load.
    #[test]
    fn the_largest_accepted_sources_compile_on_a_small_stack() {
        let compiled = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let nested = format!("{}.a{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
                let piped = format!(".a{}", " | .a".repeat((MAX_SOURCE_LEN - 2) / 5));
                let added = format!("1{}", " + 1".repeat((MAX_SOURCE_LEN - 1) / 4));
                let cel_nested = format!("{}1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
                let cel_added = format!("1{}", " + 1".repeat((MAX_SOURCE_LEN - 1) / 4));
                [
                    Jq::compile(&nested).is_ok(),
                    Jq::compile(&piped).is_ok(),
                    Jq::compile(&added).is_ok(),
                    Cel::compile(&cel_nested).is_ok(),
                    // The CEL parser has its own recursion limit: a refusal, not a crash.
                    Cel::compile(&cel_added).is_ok() || Cel::compile(&cel_added).is_err(),
                ]
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
        assert_eq!(compiled, [true; 5]);
    }

    #[test]
    fn cel_with_comprehensions_is_the_unbounded_kind() {
        let unbounded = |src: &str| Cel::compile(src).map(|c| c.unbounded).unwrap_or_default();
        assert!(unbounded("[1, 2].map(x, x * 2).size() > 1"));
        assert!(unbounded("self.spec.containers.exists(c, c.name == 'a')"));
        assert!(unbounded("has(self.a) && [self.b].all(x, x > 0)"));
        assert!(unbounded(
            "{'k': self.items.filter(i, i > 1)}.k.size() == 0"
        ));
        assert!(!unbounded("has(self.spec.claimRef.name)"));
        assert!(!unbounded(
            "!(self.status.phase in ['Bound', 'Released', 'Failed'])"
        ));
        assert!(!unbounded("self.spec.storageClassName == 'kwok-volume'"));
    }

    /// Without a sandbox installed (as in these unit tests) programs run in-process;
    /// in a child (`outputs_here`, `reply_here`) the answers are the same as in-process.
    #[test]
    fn the_childs_answers_are_the_in_process_ones() {
        use super::super::sandbox::Reply;
        let input = json!({"a": [1, 2, 3], "d": "1m30s"});
        let program = jq(".a | map(. * 2) | add");
        assert!(!program.is_native());
        assert_eq!(program.outputs_here(&input), Ok(vec![json!(12)]));
        assert_eq!(
            program
                .outputs(&input)
                .map(|o| o.into_iter().map(Cow::into_owned).collect::<Vec<_>>()),
            Ok(vec![json!(12)])
        );
        let cel = |src: &str| Cel::compile(src).expect(src);
        assert_eq!(
            cel("self.a.map(x, x + 1)").reply_here(&input),
            Reply::Value(json!([2, 3, 4]))
        );
        assert_eq!(
            cel("duration(self.d)").reply_here(&input),
            Reply::Duration(90_000_000_000)
        );
        assert!(matches!(
            cel("self.nothing").reply_here(&input),
            Reply::Error(_)
        ));
    }
}
