//! Where the jq and CEL programs that can run without bound are evaluated: a child
//! process of the same binary (`kstage __eval`), with a memory limit, killed when an
//! evaluation overruns its time.
//!
//! jq is a full language (recursion, `repeat`, `range`, string repetition) and neither
//! jaq nor the `cel` crate can be interrupted, limited in memory or kept from overflowing
//! the stack from the outside: in-process, one hostile expression could abort kstage
//! (stack overflow), stall it (a loop holds a thread for ever) or exhaust its memory. A
//! child process is the boundary that contains all three: a stack overflow or an
//! exhausted memory limit ends the child, an overrun is ended by killing it, and the next
//! evaluation gets a fresh child. What a program may cost is [`Limits`]: wall time per
//! evaluation and the child's data memory (`RLIMIT_DATA`).
//!
//! Only programs that can be unbounded go here: jq programs the native evaluator does not
//! run (every jq expression of KWOK's own Stages runs natively, in-process, in
//! microseconds) and CEL programs with comprehensions (`map`, `filter`, `all`, `exists`,
//! `exists_one`); CEL without them is bounded by the size of its source and of the object.
//! The boundary is installed by the `kstage` binary ([`install`]); without it (kstage used
//! as a library, its unit tests) every program runs in-process, unbounded.

use std::borrow::Cow;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one evaluation may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time of one evaluation (its object's transfer included).
    pub time: Duration,
    /// Memory of the evaluating process, in bytes.
    pub memory: u64,
}

impl Default for Limits {
    /// 100 ms and 256 MiB: an ordinary expression takes microseconds and kilobytes.
    fn default() -> Self {
        Self {
            time: Duration::from_millis(100),
            memory: 256 << 20,
        }
    }
}

/// A program to evaluate, and its input: borrowed where it is sent (the object is
/// written to the child as it is, not copied first), owned where it is read.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request<'a> {
    /// A jq program; the answer is its outputs.
    Jq {
        /// The program.
        source: Cow<'a, str>,
        /// Its input.
        input: Cow<'a, Value>,
    },
    /// A CEL program with `self` bound to `input`; the answer is its result.
    Cel {
        /// The program.
        source: Cow<'a, str>,
        /// The object.
        input: Cow<'a, Value>,
    },
}

/// The answer to a [`Request`].
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Reply {
    /// A jq program's outputs.
    Outputs(Vec<Value>),
    /// A CEL result that has a JSON form.
    Value(Value),
    /// A CEL duration, in nanoseconds.
    Duration(i64),
    /// A CEL timestamp, RFC 3339.
    Timestamp(String),
    /// The program failed (a runtime error, as in-process).
    Error(String),
}

/// Why a sandboxed evaluation gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Overrun {
    /// It ran longer than [`Limits::time`].
    #[error("exceeded its time budget of {0:?}")]
    Time(Duration),
    /// The evaluating process ended: a stack overflow or the memory budget.
    #[error(
        "ended the evaluating process ({0}): it overflowed the stack or exceeded its memory budget of {1} MiB"
    )]
    Crashed(String, u64),
    /// The evaluating process could not be started or reached.
    #[error("could not be evaluated: {0}")]
    Unavailable(String),
}

struct Sandbox {
    exe: std::path::PathBuf,
    limits: Limits,
    idle: Mutex<Vec<Worker>>,
}

static SANDBOX: OnceLock<Sandbox> = OnceLock::new();

/// Evaluate unbounded programs in child processes of `exe` (the `kstage` binary) from now
/// on, within `limits`. A second call changes nothing.
pub fn install(exe: std::path::PathBuf, limits: Limits) {
    let _ = SANDBOX.set(Sandbox {
        exe,
        limits,
        idle: Mutex::default(),
    });
}

/// Whether a sandbox is installed (else programs run in-process).
pub fn installed() -> bool {
    SANDBOX.get().is_some()
}

/// Evaluate `request` in a child process; `None` when no sandbox is installed (the caller
/// evaluates in-process).
pub fn eval(request: &Request<'_>) -> Option<Result<Reply, Overrun>> {
    let sandbox = SANDBOX.get()?;
    Some(sandbox.eval(request))
}

impl Sandbox {
    fn eval(&self, request: &Request<'_>) -> Result<Reply, Overrun> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let spawn = || {
            Worker::spawn(&self.exe, self.limits.memory)
                .map_err(|e| Overrun::Unavailable(format!("starting {}: {e}", self.exe.display())))
        };
        let mut worker = match idle {
            Some(worker) => worker,
            None => spawn()?,
        };
        let mut sent = worker.send(request);
        if sent.is_err() {
            // An idle child that went away meanwhile is not this program's doing: once
            // more with a fresh one.
            worker.end();
            worker = spawn()?;
            sent = worker.send(request);
        }
        let answer = match sent {
            Ok(()) => worker.replies.recv_timeout(self.limits.time),
            Err(_) => Err(mpsc::RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(Some(line)) => {
                let reply = serde_json::from_str(&line)
                    .map_err(|e| Overrun::Unavailable(format!("an unreadable answer: {e}")));
                self.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(worker);
                reply
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                worker.end();
                Err(Overrun::Time(self.limits.time))
            }
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = worker.end();
                Err(Overrun::Crashed(status, self.limits.memory >> 20))
            }
        }
    }
}

/// One evaluating child process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Its answers, one line each; `None` once it ended.
    replies: mpsc::Receiver<Option<String>>,
}

impl Worker {
    fn spawn(exe: &std::path::Path, memory: u64) -> std::io::Result<Worker> {
        let mut child = Command::new(exe)
            .args(["__eval", "--memory", &memory.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // A stack overflow or failed allocation prints to stderr: the parent reports
            // it in its own words instead.
            .stderr(Stdio::null())
            .spawn()?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => return Err(std::io::Error::other("no pipes to the child")),
        };
        let (tx, replies) = mpsc::channel();
        std::thread::Builder::new()
            .name("kstage-eval-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    match line {
                        Ok(line) => {
                            if tx.send(Some(line)).is_err() {
                                return;
                            }
                        }
                        Err(_) => break,
                    }
                }
                let _ = tx.send(None);
            })?;
        Ok(Worker {
            child,
            stdin,
            replies,
        })
    }

    /// Send `request`, one JSON line, in one write (the pipe is unbuffered: written
    /// straight to it, serde_json would make a system call per token).
    fn send(&mut self, request: &Request<'_>) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::from)?;
        line.push(b'\n');
        self.stdin.write_all(&line)?;
        self.stdin.flush()
    }

    /// Kill the child and say how it ended.
    fn end(mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.try_wait();
    }
}

static CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a sandbox child ([`super::evaluator::serve`]).
pub fn is_child() -> bool {
    CHILD.load(std::sync::atomic::Ordering::Relaxed)
}

/// Mark this process as a sandbox child (see [`super::evaluator::serve`]).
pub(super) fn become_child() {
    CHILD.store(true, std::sync::atomic::Ordering::Relaxed);
}
