//! What Linux's `/proc` says of a process: CPU time, resident memory, open files. Read by
//! `kstage bench` (an engine's cost) and `/metrics` (`process_*`).

use std::time::Duration;

/// Which process [`process_cpu`] and [`peak_rss_bytes`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// This process.
    Current,
    /// Another process on this machine (an engine run separately).
    Pid(u32),
}

impl Process {
    fn proc_file(self, name: &str) -> Option<String> {
        let path = match self {
            Process::Current => format!("/proc/self/{name}"),
            Process::Pid(pid) => format!("/proc/{pid}/{name}"),
        };
        std::fs::read_to_string(path).ok()
    }
}

/// CPU time used by a process (user + system), from `/proc/PID/stat`.
pub fn process_cpu(process: Process) -> Option<Duration> {
    let stat = process.proc_file("stat")?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // Linux reports clock ticks of 1/100 s (USER_HZ) to user space.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Peak resident memory of a process, from `/proc/PID/status` (`VmHWM`).
pub fn peak_rss_bytes(process: Process) -> Option<u64> {
    status_kb(process, "VmHWM:")
}

/// Resident memory of a process now (`VmRSS`).
pub fn rss_bytes(process: Process) -> Option<u64> {
    status_kb(process, "VmRSS:")
}

fn status_kb(process: Process, field: &str) -> Option<u64> {
    let status = process.proc_file("status")?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Open file descriptors of a process.
pub fn open_fds(process: Process) -> Option<usize> {
    let dir = match process {
        Process::Current => "/proc/self/fd".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/fd"),
    };
    Some(std::fs::read_dir(dir).ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_not_a_missing_one() {
        assert!(peak_rss_bytes(Process::Current).is_some_and(|b| b > 0));
        assert!(rss_bytes(Process::Current).is_some_and(|b| b > 0));
        assert!(process_cpu(Process::Current).is_some());
        let before = open_fds(Process::Current).expect("fds");
        let file = std::fs::File::open("/proc/self/status").expect("open");
        assert!(open_fds(Process::Current).expect("fds") > before);
        drop(file);
        assert!(peak_rss_bytes(Process::Pid(u32::MAX)).is_none());
        assert!(open_fds(Process::Pid(u32::MAX)).is_none());
    }
}
