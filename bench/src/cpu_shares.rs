//! Where the machine's CPU went over a phase: each process the bench started, every
//! PostgreSQL process together, and what was left idle, waiting on I/O or taken by
//! the hypervisor. On two shared cores a slow phase is short of CPU (its own or a
//! neighbour's) or waiting on the disk, and these figures say which.

use std::time::Instant;

use super::machine::cpu_seconds;

/// CPU counters at the start of a phase.
pub struct CpuShares {
    named: Vec<(&'static str, u32, f64)>,
    postgres: f64,
    machine: Option<MachineTicks>,
    started: Instant,
}

/// The machine's idle, I/O wait and stolen time so far, all cores, in seconds.
#[derive(Clone, Copy)]
struct MachineTicks {
    idle: f64,
    iowait: f64,
    /// Taken by the hypervisor for other guests: a busy neighbour, not our work.
    steal: f64,
}

impl CpuShares {
    /// Starts counting for `processes` (a name and a pid each), PostgreSQL's processes
    /// and the machine.
    pub fn start(processes: &[(&'static str, u32)]) -> Self {
        Self {
            named: processes.iter().map(|&(name, pid)| (name, pid, cpu_seconds(pid).unwrap_or_default())).collect(),
            postgres: postgres_seconds(),
            machine: machine_ticks(),
            started: Instant::now(),
        }
    }

    /// "projector 18 %, PostgreSQL 95 %, …, idle 20 %, I/O wait 5 %, stolen 1 %": each a share of
    /// one core over the phase (the machine has 100 % per core).
    pub fn describe(&self) -> String {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        let share = |seconds: f64| format!("{:.0} %", seconds / wall * 100.0);
        let mut parts: Vec<String> = self
            .named
            .iter()
            .map(|(name, pid, before)| match cpu_seconds(*pid) {
                Some(now) => format!("{name} {}", share(now - before)),
                None => format!("{name} gone"),
            })
            .collect();
        // Backends that ended during the phase take their CPU time with them: a floor.
        parts.push(format!("PostgreSQL {}", share((postgres_seconds() - self.postgres).max(0.0))));
        if let (Some(before), Some(now)) = (self.machine, machine_ticks()) {
            parts.push(format!("idle {}", share(now.idle - before.idle)));
            parts.push(format!("I/O wait {}", share(now.iowait - before.iowait)));
            parts.push(format!("stolen {}", share(now.steal - before.steal)));
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        format!("{} (shares of one core, {cores} cores in all)", parts.join(", "))
    }
}

/// CPU time of every process named `postgres` (the server and its backends).
pub fn postgres_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "postgres"))
        .filter_map(cpu_seconds)
        .sum()
}

/// The first line of /proc/stat: user nice system idle iowait irq softirq steal, in
/// 1/100 s.
fn machine_ticks() -> Option<MachineTicks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<f64> =
        stat.lines().next()?.split_whitespace().skip(1).take(8).filter_map(|field| field.parse().ok()).collect();
    let seconds = |at: usize| fields.get(at).map(|ticks| ticks / 100.0);
    Some(MachineTicks { idle: seconds(3)?, iowait: seconds(4)?, steal: seconds(7)? })
}
