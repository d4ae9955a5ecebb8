//! A plugin's stderr: the last few KiB of each store's output kept in memory, so a call
//! that traps can say what the guest's runtime printed before it (Python's traceback,
//! Rust's or Go's panic message), and passed through to kstage's own stderr when the
//! plugin is granted `stderr` (`kstage plugin call --stderr`, or `wasi: {stderr: true}`).
//!
//! Capture needs no grant: what a plugin writes there stays in memory, bounded, and is
//! shown only in the error of a call that failed.

use std::collections::VecDeque;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The most bytes of a store's stderr kept.
pub const TAIL_BYTES: usize = 4096;

/// The end of one store's stderr (shared by every stream the guest opens on it).
#[derive(Debug, Clone)]
pub struct StderrTail {
    tail: Arc<Mutex<VecDeque<u8>>>,
    forward: bool,
}

impl StderrTail {
    /// An empty tail; with `forward`, what is written also goes to kstage's stderr.
    pub fn new(forward: bool) -> Self {
        Self {
            tail: Arc::default(),
            forward,
        }
    }

    /// Forget what was written so far (a call starts with an empty tail).
    pub fn clear(&self) {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        if !tail.is_empty() {
            tail.clear();
        }
    }

    /// The text written since the last [`StderrTail::clear`] (its last [`TAIL_BYTES`]).
    pub fn text(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let (front, back) = tail.as_slices();
        let mut bytes = Vec::with_capacity(tail.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn push(&self, bytes: &[u8]) {
        if self.forward {
            // Best effort, as any program's stderr: a closed terminal loses the text.
            let _ = std::io::stderr().write_all(bytes);
        }
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let keep = &bytes[bytes.len().saturating_sub(TAIL_BYTES)..];
        tail.extend(keep);
        let excess = tail.len().saturating_sub(TAIL_BYTES);
        tail.drain(..excess);
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for StderrTail {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Never full: older text is dropped instead.
        Ok(64 << 10)
    }
}

/// Always ready (writes never block). `Pollable` is an `async_trait`; this is its
/// expansion for a future that is ready at once.
impl Pollable for StderrTail {
    fn ready<'life0, 'async_trait>(
        &'life0 mut self,
    ) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(std::future::ready(()))
    }
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_written_since_it_was_cleared() {
        let mut tail = StderrTail::new(false);
        tail.write(Bytes::from_static(b"first call\n"))
            .expect("write");
        assert_eq!(tail.text(), "first call\n");
        tail.clear();
        assert_eq!(tail.text(), "");
        let long = "x".repeat(TAIL_BYTES);
        tail.write(Bytes::from(format!("head\n{long}")))
            .expect("write");
        tail.write(Bytes::from_static(b"\nlast line\n"))
            .expect("write");
        let text = tail.text();
        assert_eq!(text.len(), TAIL_BYTES);
        assert!(
            text.ends_with("x\nlast line\n"),
            "{}",
            &text[text.len() - 20..]
        );
        assert!(!text.contains("head"));
        // Every stream the guest opens shares the one tail.
        let mut other = tail.p2_stream();
        other
            .write(Bytes::from_static(b"from another stream\n"))
            .expect("write");
        assert!(tail.text().ends_with("from another stream\n"));
    }
}
