//! What the figures were measured on, and the resident memory of a process over time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

/// One line: CPUs, CPU model, memory, load, date.
pub fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = field(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib: u64 = field(&meminfo, "MemTotal").and_then(|value| kib(&value)).unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    format!(
        "{cpus} CPUs ({model}), {:.1} GiB RAM, load average at start {load}; {}",
        memory_kib as f64 / 1_048_576.0,
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
    )
}

/// The value of `name: value` in a /proc file such as `/proc/<pid>/status`, trimmed.
pub fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find(|line| line.split(':').next().is_some_and(|key| key.trim() == name))
        .and_then(|line| line.split_once(':'))
        .map(|(_, value)| value.trim().to_owned())
}

fn kib(value: &str) -> Option<u64> {
    value.split_whitespace().next()?.parse().ok()
}

/// `VmRSS` of `pid` in KiB, if it is still running.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    field(&status, "VmRSS").and_then(|value| kib(&value))
}

/// CPU time (user + system) `pid` has used so far, in seconds (Linux counts in 1/100 s).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = stat(pid)?;
    Some(ticks(&fields, &[11, 12])? as f64 / 100.0)
}

/// CPU time of the process tree under `root` (a PostgreSQL postmaster): its own, that of
/// its children running now, and that of every child it has reaped (a backend that
/// ended), in seconds. PostgreSQL's processes are all the postmaster's children, so two
/// servers on one machine are told apart by their postmasters.
pub fn tree_cpu_seconds(root: u32) -> Option<f64> {
    // utime, stime, then cutime, cstime: the reaped children's.
    let own = ticks(&stat(root)?, &[11, 12, 13, 14])?;
    let entries = std::fs::read_dir("/proc").ok()?;
    let children: u64 = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        // The parent's pid is the second field after the command name.
        .filter(|fields| fields.get(1).and_then(|parent| parent.parse::<u32>().ok()) == Some(root))
        .filter_map(|fields| ticks(&fields, &[11, 12]))
        .sum();
    Some((own + children) as f64 / 100.0)
}

/// The fields of `/proc/<pid>/stat` after the command name, which is in parentheses and
/// may hold spaces: the state first, then the parent's pid, ….
fn stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_owned).collect())
}

/// The sum of the fields at `at`, clock ticks each.
fn ticks(fields: &[String], at: &[usize]) -> Option<u64> {
    at.iter().map(|index| fields.get(*index)?.parse::<u64>().ok()).sum()
}

/// Samples a process's RSS every 100 ms until stopped.
pub struct RssSampler {
    samples: Arc<Mutex<Vec<u64>>>,
    task: JoinHandle<()>,
}

/// Resident memory over a measurement, in MiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rss {
    pub first: f64,
    pub peak: f64,
    pub last: f64,
}

impl Rss {
    pub fn summary(self) -> String {
        format!("{:.0} MiB peak ({:.0} → {:.0})", self.peak, self.first, self.last)
    }
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let collected = samples.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                every.tick().await;
                match rss_kib(pid) {
                    Some(value) => collected.lock().unwrap_or_else(|poison| poison.into_inner()).push(value),
                    None => break,
                }
            }
        });
        Self { samples, task }
    }

    pub fn stop(self) -> Rss {
        self.task.abort();
        let samples = self.samples.lock().unwrap_or_else(|poison| poison.into_inner()).clone();
        let mib = |kib: u64| kib as f64 / 1024.0;
        Rss {
            first: samples.first().copied().map_or(0.0, mib),
            peak: samples.iter().copied().max().map_or(0.0, mib),
            last: samples.last().copied().map_or(0.0, mib),
        }
    }
}
