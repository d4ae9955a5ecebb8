//! The kstage binary as a child process whose stderr lines are read on a thread, for the
//! tests that run it as a user does (`kstage up`, `kstage apiserver`, `kstage run`).

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// A running `kstage ARGS`; killed when dropped.
pub struct Spawned {
    /// The process.
    pub child: Child,
    lines: Receiver<String>,
    /// Every stderr line read so far.
    pub seen: Vec<String>,
}

impl Spawned {
    /// Start `kstage args...` in the project root.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// [`Spawned::start`] with these environment variables.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kstage"))
            .args(args)
            .envs(env.iter().copied())
            .current_dir(crate::root())
            .env_remove("KSTAGE_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .expect("kstage starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Read lines until one satisfies `done` (true) or a minute passes or the process
    /// closes stderr (false).
    pub fn wait_for(&mut self, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = done(&line);
                    self.seen.push(line);
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Take every line said so far without waiting for more.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// What it said, one line each.
    pub fn said(&self) -> String {
        self.seen.join("\n")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
