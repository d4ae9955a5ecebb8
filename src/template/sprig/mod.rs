//! sprig v3's text/template functions (`sprig.TxtFuncMap()`, as KWOK registers them), one
//! module per group of sprig's documentation.
//!
//! Each function checks its arity and argument types the way Go's `text/template` checks
//! a typed Go function, and fails where sprig fails (an error, or a panic Go turns into
//! `error calling NAME: ...`). Numbers given as `interface{}` are converted with sprig's
//! rules ([`conv::to_int64`], [`conv::to_float64`]); values are printed with Go's `%v`
//! ([`conv::sprint`]).
//!
//! What kstage does differently, by design:
//! - whatever is non-deterministic (`now`, `rand*`, `uuidv4`, keys, salts, IVs) comes from
//!   the [`TemplateEnv`], so `kstage sim` repeats and `--kwok-golden` prints placeholders;
//! - `env`/`expandenv` read only the variables the daemon was told to expose;
//!   `getHostByName` does no DNS and fails;
//! - values are immutable: `set`, `unset`, `merge`, `append`... return the new value and
//!   leave their argument as it was;
//! - a time (`now`, `toDate`, `dateModify`) is a string in Go's `Time.String()` form, which
//!   the date functions read back;
//! - what a function builds (`repeat`, `until`, keys, ...) draws on a per-render budget
//!   ([`charge`]), checked before anything is allocated.

mod budget;
mod conv;
mod crypto;
mod dates;
mod defaults;
mod dicts;
mod encoding;
mod golang_time;
mod lists;
mod math;
mod misc;
mod regex;
mod semver;
mod url;
mod strings;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use gotmpl::{FuncMap, TemplateError as GoError, Value};

use super::env::TemplateEnv;

use budget::charge;
pub(crate) use budget::reset as reset_budget;

/// How many arguments a function takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arity {
    /// Exactly this many.
    Exact(usize),
    /// This many or more (variadic).
    AtLeast(usize),
    /// Between these two, inclusive.
    Between(usize, usize),
}

/// One call: the function's name (for errors) and the env.
pub(crate) struct Call<'a> {
    pub(crate) name: &'static str,
    pub(crate) env: &'a dyn TemplateEnv,
}

impl Call<'_> {
    /// Go's error for a function that returned an error (or panicked).
    pub(crate) fn fail(&self, message: impl std::fmt::Display) -> GoError {
        GoError::Exec(format!("error calling {}: {message}", self.name))
    }

    /// [`charge`]s `bytes` to the render budget, failing this call when it is spent.
    pub(crate) fn charge(&self, bytes: usize) -> Result<(), GoError> {
        charge(bytes).map_err(|m| self.fail(m))
    }
}

/// A function's body, called after its arity was checked.
pub(crate) type Body = fn(&Call<'_>, &[Value]) -> Result<Value, GoError>;

/// A sprig function: name, arity, body.
pub(crate) struct Func {
    pub(crate) name: &'static str,
    pub(crate) arity: Arity,
    pub(crate) body: Body,
}

/// Shorthand for the tables.
pub(crate) const fn f(name: &'static str, arity: Arity, body: Body) -> Func {
    Func { name, arity, body }
}

/// Every group's table.
fn groups() -> [&'static [Func]; 12] {
    [
        strings::FUNCS,
        math::FUNCS,
        dates::FUNCS,
        defaults::FUNCS,
        encoding::FUNCS,
        lists::FUNCS,
        dicts::FUNCS,
        crypto::FUNCS,
        regex::FUNCS,
        misc::FUNCS,
        conv::FUNCS,
        misc::PATH_FUNCS,
    ]
}

/// The names of every sprig function, in table order.
#[cfg(test)]
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    groups().into_iter().flatten().map(|func| func.name)
}

/// Adds every sprig function to `map`, reading `env` for anything non-deterministic.
pub(crate) fn register(map: &mut FuncMap, env: &Arc<dyn TemplateEnv>) {
    for func in groups().into_iter().flatten() {
        let env = env.clone();
        let (name, arity, body) = (func.name, func.arity, func.body);
        map.insert(
            name.to_owned(),
            Arc::new(move |args: &[Value]| {
                check_arity(name, arity, args.len())?;
                body(
                    &Call {
                        name,
                        env: env.as_ref(),
                    },
                    args,
                )
            }),
        );
    }
}

fn check_arity(name: &str, arity: Arity, got: usize) -> Result<(), GoError> {
    let (ok, want) = match arity {
        Arity::Exact(n) => (got == n, n.to_string()),
        Arity::AtLeast(n) => (got >= n, format!("at least {n}")),
        Arity::Between(a, b) => (
            (a..=b).contains(&got),
            if got < a {
                format!("at least {a}")
            } else {
                b.to_string()
            },
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(GoError::Exec(format!(
            "wrong number of args for {name}: want {want} got {got}"
        )))
    }
}
