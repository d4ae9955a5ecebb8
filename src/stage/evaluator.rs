//! The sandbox's child (`kstage __eval`): answers the [`sandbox`](super::sandbox)'s
//! requests by compiling (once each) and running jq and CEL programs, under a data memory
//! limit. The parent side, which knows nothing of the programs, is in `sandbox`.

use std::collections::HashMap;
use std::io::{BufRead as _, Write as _};

use super::expr::{Cel, Jq};
use super::sandbox::{Reply, Request};

/// The programs a child keeps compiled, at most.
const COMPILED: usize = 256;

/// `kstage __eval --memory BYTES`: answer [`Request`]s from stdin, one JSON line each,
/// with a data memory limit of `memory` bytes.
pub fn serve(memory: u64) -> std::io::Result<()> {
    super::sandbox::become_child();
    let limit = rustix::process::Rlimit {
        current: Some(memory),
        maximum: Some(memory),
    };
    rustix::process::setrlimit(rustix::process::Resource::Data, limit)
        .map_err(std::io::Error::from)?;
    let mut jq: HashMap<String, Jq> = HashMap::new();
    let mut cel: HashMap<String, Cel> = HashMap::new();
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let reply = match serde_json::from_str::<Request>(&line?) {
            Err(e) => Reply::Error(format!("an unreadable request: {e}")),
            Ok(Request::Jq { source, input }) => {
                match compiled(&mut jq, source.into_owned(), Jq::compile) {
                    Ok(program) => match program.outputs_here(&input) {
                        Ok(outputs) => Reply::Outputs(outputs),
                        Err(e) => Reply::Error(e.to_string()),
                    },
                    Err(e) => Reply::Error(e),
                }
            }
            Ok(Request::Cel { source, input }) => {
                match compiled(&mut cel, source.into_owned(), Cel::compile) {
                    Ok(program) => program.reply_here(&input),
                    Err(e) => Reply::Error(e),
                }
            }
        };
        serde_json::to_writer(&mut stdout, &reply)?;
        stdout.write_all(b"\n")?;
        stdout.flush()?;
    }
    Ok(())
}

/// The program of `source`, compiled once (the cache is emptied when full).
fn compiled<T>(
    cache: &mut HashMap<String, T>,
    source: String,
    compile: impl FnOnce(&str) -> Result<T, String>,
) -> Result<&T, String> {
    if cache.len() >= COMPILED && !cache.contains_key(&source) {
        cache.clear();
    }
    match cache.entry(source) {
        std::collections::hash_map::Entry::Occupied(o) => Ok(o.into_mut()),
        std::collections::hash_map::Entry::Vacant(v) => {
            let program = compile(v.key())?;
            Ok(v.insert(program))
        }
    }
}
