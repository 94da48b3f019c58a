//! The two load generators, each a process of its own: wrk against the API (64
//! connections, 2 threads) and pgbench against PostgreSQL (16 clients, the API's pool
//! size, 2 threads), for the same bounded time.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use tokio::process::Command;

use super::infra::admin_url;
use super::machine::{Rss, RssSampler};
use super::scenarios::Scenario;
use super::{Context, Result};

/// The wrk script, also at `bench/requests.lua` for running wrk by hand.
pub const LUA: &str = include_str!("../requests.lua");

pub struct Http {
    pub requests: u64,
    pub per_second: f64,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    /// Non-2xx answers and socket errors: a run with any is not a valid measurement.
    pub errors: u64,
    pub rss: Rss,
}

/// Runs wrk for `run_for` with the requests of `scenario`, sampling the API's RSS.
pub async fn wrk(
    wrk: &Path,
    work: &Path,
    base: &str,
    scenario: &Scenario,
    run_for: Duration,
    api_pid: u32,
) -> Result<Http> {
    let script = work.join("requests.lua");
    std::fs::write(&script, LUA).context(format!("write {}", script.display()))?;
    let requests = work.join("requests.txt");
    let lines: String = scenario.requests.iter().map(|(key, path)| format!("{key}\t{path}\n")).collect();
    std::fs::write(&requests, lines).context(format!("write {}", requests.display()))?;
    let rss = RssSampler::start(api_pid);
    let output = Command::new(wrk)
        .args(["-t2", "-c64", &format!("-d{}s", run_for.as_secs()), "--latency", "--timeout", "5s", "-s"])
        .arg(&script)
        .arg(format!("{base}/"))
        .arg("--")
        .arg(&requests)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("run wrk")?;
    let rss = rss.stop();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("LECTERN_BENCH "))
        .ok_or_else(|| format!("wrk printed no summary:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr)))?;
    let json: serde_json::Value = serde_json::from_str(line).context("wrk's summary")?;
    let number = |name: &str| json[name].as_u64().unwrap_or_default();
    let requests = number("requests");
    Ok(Http {
        requests,
        per_second: requests as f64 / (number("duration_us") as f64 / 1e6).max(1e-9),
        mean: Duration::from_micros(number("mean_us")),
        p50: Duration::from_micros(number("p50_us")),
        p99: Duration::from_micros(number("p99_us")),
        errors: ["non_2xx", "connect", "read", "write", "timeout"].iter().map(|name| number(name)).sum(),
        rss,
    })
}

/// Runs pgbench for `run_for` with the scenario's statement; returns transactions/s.
pub async fn pgbench(
    pgbench: &Path,
    work: &Path,
    database: &str,
    scenario: &Scenario,
    run_for: Duration,
) -> Result<f64> {
    let script = work.join("pgbench.sql");
    std::fs::write(&script, &scenario.script).context(format!("write {}", script.display()))?;
    let server: PgConnectOptions = admin_url().parse().context("database URL")?;
    let mut command = Command::new(pgbench);
    command
        .env("PGOPTIONS", format!("-c plan_cache_mode={}", scenario.plan_cache_mode))
        .args(["-n", "-M", "prepared", "-c", "16", "-j", "2", "-T", &run_for.as_secs().to_string(), "-f"])
        .arg(&script)
        .args(["-h", server.get_host(), "-p", &server.get_port().to_string(), "-U", server.get_username()]);
    for (name, value) in &scenario.defines {
        command.arg("-D").arg(format!("{name}={value}"));
    }
    let output = command.arg(database).stdin(Stdio::null()).kill_on_drop(true).output().await.context("run pgbench")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failed = stdout
        .lines()
        .find_map(|line| line.strip_prefix("number of failed transactions: "))
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|count| count != "0");
    let tps = stdout
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse::<f64>().ok());
    match tps {
        Some(tps) if output.status.success() && !failed => Ok(tps),
        _ => Err(format!(
            "pgbench failed for {}:\n{stdout}\n{}\nscript:\n{}",
            scenario.name,
            String::from_utf8_lossy(&output.stderr),
            scenario.script
        )
        .into()),
    }
}
