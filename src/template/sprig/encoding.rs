//! sprig's encodings: `b64enc`, `b64dec`, `b32enc`, `b32dec` (standard alphabets with
//! padding, as Go's `StdEncoding`). Decoding errors are printed as the result, as sprig
//! does (`illegal base64 data at input byte 4`).

use base64::Engine as _;

use super::conv::{str_arg, string};
use super::{Arity::Exact, Func, f};

pub(crate) const FUNCS: &[Func] = &[
    f("b64enc", Exact(1), |c, a| {
        let s = str_arg(&a[0])?;
        c.charge(s.len() / 3 * 4 + 4)?;
        Ok(string(base64::engine::general_purpose::STANDARD.encode(s)))
    }),
    f("b64dec", Exact(1), |_, a| {
        Ok(string(b64dec(str_arg(&a[0])?)))
    }),
    f("b32enc", Exact(1), |c, a| {
        let s = str_arg(&a[0])?;
        c.charge(s.len() / 5 * 8 + 8)?;
        Ok(string(data_encoding::BASE32.encode(s.as_bytes())))
    }),
    f("b32dec", Exact(1), |_, a| {
        Ok(string(b32dec(str_arg(&a[0])?)))
    }),
];

/// Go's decoders skip line breaks.
fn without_newlines(s: &str) -> String {
    s.chars().filter(|c| *c != '\r' && *c != '\n').collect()
}

fn b64dec(s: &str) -> String {
    let input = without_newlines(s);
    match base64::engine::general_purpose::STANDARD.decode(&input) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            let at = match e {
                base64::DecodeError::InvalidByte(at, _)
                | base64::DecodeError::InvalidLastSymbol(at, _) => at,
                _ => input.len() / 4 * 4,
            };
            format!("illegal base64 data at input byte {at}")
        }
    }
}

fn b32dec(s: &str) -> String {
    let input = without_newlines(s);
    match data_encoding::BASE32.decode(input.as_bytes()) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("illegal base32 data at input byte {}", e.position),
    }
}
