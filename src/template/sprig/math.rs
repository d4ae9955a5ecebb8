//! sprig's math: integer arithmetic on `int64` (`add`, `sub`, `div`, `max`, ...), float
//! arithmetic through decimals (`addf`, `divf`, ...), rounding, and integer sequences
//! (`until`, `untilStep`, `seq`), which are charged to the render budget before they are
//! built.

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{int_arg, list, string, to_float64, to_int64, wrong_type};
use super::{
    Arity::{AtLeast, Between, Exact},
    Call, Func, f,
};

pub(crate) const FUNCS: &[Func] = &[
    f("add1", Exact(1), |_, a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_add(1)))
    }),
    f("add", AtLeast(0), |_, a| {
        Ok(Value::Int(
            a.iter().fold(0i64, |s, v| s.wrapping_add(to_int64(v))),
        ))
    }),
    f("sub", Exact(2), |_, a| {
        Ok(Value::Int(to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))))
    }),
    f("div", Exact(2), |c, a| {
        let d = nonzero(c, to_int64(&a[1]))?;
        Ok(Value::Int(to_int64(&a[0]).wrapping_div(d)))
    }),
    f("mod", Exact(2), |c, a| {
        let d = nonzero(c, to_int64(&a[1]))?;
        Ok(Value::Int(to_int64(&a[0]).wrapping_rem(d)))
    }),
    f("mul", AtLeast(1), |_, a| {
        Ok(Value::Int(
            a[1..]
                .iter()
                .fold(to_int64(&a[0]), |p, v| p.wrapping_mul(to_int64(v))),
        ))
    }),
    f("randInt", Exact(2), |c, a| {
        let (min, max) = (int_arg(&a[0])?, int_arg(&a[1])?);
        if c.env.golden() {
            return Ok(string(super::misc::placeholder(c.name, a)));
        }
        let span = max
            .checked_sub(min)
            .filter(|s| *s > 0)
            .ok_or_else(|| c.fail("invalid argument to Intn"))?;
        let r = super::misc::random_below(c.env, span.unsigned_abs());
        Ok(Value::Int(min + i64::try_from(r).unwrap_or(0)))
    }),
    f("add1f", Exact(1), |_, a| {
        Ok(decimal_op(&a[0], &[Value::Int(1)], Op::Add))
    }),
    f("addf", AtLeast(0), |_, a| {
        Ok(decimal_op(&Value::Float(0.0), a, Op::Add))
    }),
    f("subf", AtLeast(1), |_, a| {
        Ok(decimal_op(&a[0], &a[1..], Op::Sub))
    }),
    f("divf", AtLeast(1), |c, a| {
        if a[1..].iter().any(|v| to_float64(v) == 0.0) {
            return Err(c.fail("decimal division by 0"));
        }
        Ok(decimal_op(&a[0], &a[1..], Op::Div))
    }),
    f("mulf", AtLeast(1), |_, a| {
        Ok(decimal_op(&a[0], &a[1..], Op::Mul))
    }),
    f("biggest", AtLeast(1), |_, a| {
        Ok(Value::Int(a.iter().map(to_int64).fold(i64::MIN, i64::max)))
    }),
    f("max", AtLeast(1), |_, a| {
        Ok(Value::Int(a.iter().map(to_int64).fold(i64::MIN, i64::max)))
    }),
    f("min", AtLeast(1), |_, a| {
        Ok(Value::Int(a.iter().map(to_int64).fold(i64::MAX, i64::min)))
    }),
    f("maxf", AtLeast(1), |_, a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), go_max),
        ))
    }),
    f("minf", AtLeast(1), |_, a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), go_min),
        ))
    }),
    f("ceil", Exact(1), |_, a| {
        Ok(Value::Float(to_float64(&a[0]).ceil()))
    }),
    f("floor", Exact(1), |_, a| {
        Ok(Value::Float(to_float64(&a[0]).floor()))
    }),
    f("round", Between(2, 3), |_, a| {
        let places = int_arg(&a[1])?;
        let round_on = match a.get(2) {
            Some(v) => float_arg(v)?,
            None => 0.5,
        };
        #[allow(clippy::cast_precision_loss)]
        let pow = 10f64.powf(places as f64);
        let digit = pow * to_float64(&a[0]);
        let fraction = digit.fract();
        let rounded = if fraction >= round_on {
            digit.ceil()
        } else {
            digit.floor()
        };
        Ok(Value::Float(rounded / pow))
    }),
    f("until", Exact(1), |c, a| {
        let count = int_arg(&a[0])?;
        sequence(c, 0, count, if count < 0 { -1 } else { 1 }).map(ints)
    }),
    f("untilStep", Exact(3), |c, a| {
        let (start, stop, step) = (int_arg(&a[0])?, int_arg(&a[1])?, int_arg(&a[2])?);
        sequence(c, start, stop, step).map(ints)
    }),
    f("seq", AtLeast(0), seq),
];

fn nonzero(c: &Call<'_>, d: i64) -> Result<i64, GoError> {
    if d == 0 {
        Err(c.fail("runtime error: integer divide by zero"))
    } else {
        Ok(d)
    }
}

/// A `float64` parameter (integers convert, as Go's constants do).
fn float_arg(v: &Value) -> Result<f64, GoError> {
    match v {
        Value::Float(x) => Ok(*x),
        #[allow(clippy::cast_precision_loss)]
        Value::Int(i) => Ok(*i as f64),
        other => Err(wrong_type("float64", other)),
    }
}

/// `math.Max`: NaN wins.
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// sprig's `execDecimalOp`: each operand converted with `toFloat64`, then read as the
/// shortest decimal that prints it (`decimal.NewFromFloat`), so `addf 0.1 0.2` is `0.3`;
/// division keeps 16 decimal places. Exact as long as the digits fit 38 places, else
/// plain float arithmetic.
fn decimal_op(first: &Value, rest: &[Value], op: Op) -> Value {
    let mut acc = to_float64(first);
    for v in rest {
        let x = to_float64(v);
        acc = match (Decimal::from_f64(acc), Decimal::from_f64(x)) {
            (Some(a), Some(b)) => a.apply(b, op).unwrap_or_else(|| float_op(acc, x, op)),
            _ => float_op(acc, x, op),
        };
    }
    Value::Float(acc)
}

fn float_op(a: f64, b: f64, op: Op) -> f64 {
    match op {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
    }
}

/// `mantissa × 10^exponent`.
#[derive(Clone, Copy)]
struct Decimal {
    mantissa: i128,
    exponent: i32,
}

impl Decimal {
    fn from_f64(f: f64) -> Option<Self> {
        if !f.is_finite() {
            return None;
        }
        let sci = format!("{f:e}");
        let (mantissa, exp) = sci.split_once('e')?;
        let exp: i32 = exp.parse().ok()?;
        let negative = mantissa.starts_with('-');
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let frac_len = i32::try_from(digits.len()).ok()? - 1;
        let m: i128 = digits.parse().ok()?;
        Some(Self {
            mantissa: if negative { -m } else { m },
            exponent: exp - frac_len,
        })
    }

    fn to_f64(self) -> f64 {
        format!("{}e{}", self.mantissa, self.exponent)
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// Both at the smaller exponent, when that fits.
    fn aligned(self, other: Self) -> Option<(i128, i128, i32)> {
        let exp = self.exponent.min(other.exponent);
        let scale = |d: Self| {
            10i128
                .checked_pow(u32::try_from(d.exponent - exp).ok()?)
                .and_then(|p| d.mantissa.checked_mul(p))
        };
        Some((scale(self)?, scale(other)?, exp))
    }

    fn apply(self, other: Self, op: Op) -> Option<f64> {
        let result = match op {
            Op::Add | Op::Sub => {
                let (a, b, exponent) = self.aligned(other)?;
                let mantissa = match op {
                    Op::Add => a.checked_add(b)?,
                    _ => a.checked_sub(b)?,
                };
                Self { mantissa, exponent }
            }
            Op::Mul => Self {
                mantissa: self.mantissa.checked_mul(other.mantissa)?,
                exponent: self.exponent.checked_add(other.exponent)?,
            },
            Op::Div => {
                let q = self.to_f64() / other.to_f64();
                let rounded: f64 = format!("{q:.16}").parse().ok()?;
                return Some(rounded);
            }
        };
        Some(result.to_f64())
    }
}

/// sprig's `untilStep(start, stop, step)` as a count and its items, charged first.
fn sequence(c: &Call<'_>, start: i64, stop: i64, step: i64) -> Result<Vec<i64>, GoError> {
    let (start, stop, step_w) = (i128::from(start), i128::from(stop), i128::from(step));
    let count = if stop < start {
        if step_w >= 0 {
            0
        } else {
            (start - stop + (-step_w) - 1) / (-step_w)
        }
    } else if step_w <= 0 {
        0
    } else {
        (stop - start + step_w - 1) / step_w
    };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    c.charge(count.saturating_mul(std::mem::size_of::<Value>()))?;
    let mut out = Vec::with_capacity(count);
    let mut i = start;
    for _ in 0..count {
        out.push(i64::try_from(i).unwrap_or_default());
        i += step_w;
    }
    Ok(out)
}

fn ints(items: Vec<i64>) -> Value {
    list(items.into_iter().map(Value::Int).collect())
}

/// sprig's `seq`: like GNU seq, the integers from start to end (inclusive) by step,
/// space-separated.
fn seq(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let p = a.iter().map(int_arg).collect::<Result<Vec<_>, _>>()?;
    let items = match p.as_slice() {
        [end] => {
            let inc = if *end < 1 { -1 } else { 1 };
            sequence(c, 1, end.saturating_add(inc), inc)?
        }
        [start, end] => {
            let step = if end < start { -1 } else { 1 };
            sequence(c, *start, end.saturating_add(step), step)?
        }
        [start, step, end] => {
            let inc = if end < start { -1 } else { 1 };
            if end < start && *step > 0 {
                Vec::new()
            } else {
                sequence(c, *start, end.saturating_add(inc), *step)?
            }
        }
        _ => Vec::new(),
    };
    let text = items
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    c.charge(text.len())?;
    Ok(string(text))
}
