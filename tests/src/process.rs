//! A long-running binary (`serve`, `dev`, `run`) under test: its output collected
//! line by line as it arrives, its addresses read from its JSON log lines, and a
//! SIGTERM that reports how it ended; a short command run to its end; and the
//! Prometheus text its operations listener serves, parsed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Lines written so far to one stream.
type Lines = Arc<Mutex<Vec<String>>>;

/// A running binary.
pub struct Service {
    child: Child,
    stdout: Lines,
    stderr: Lines,
    readers: Vec<JoinHandle<()>>,
}

/// How a [`Service`] ended.
#[derive(Debug)]
pub struct Ended {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Service {
    /// Starts `binary` with `args` and only `env` (plus JSON logs and no colour), so
    /// the machine's environment cannot change what is tested.
    pub fn spawn(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(binary)
            .args(args)
            .env_clear()
            .env("NO_COLOR", "1")
            .env("LECTERN_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {}: {error}", binary.display()));
        let stdout = Lines::default();
        let stderr = Lines::default();
        let readers = vec![
            collect(child.stdout.take().expect("piped stdout"), stdout.clone()),
            collect(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        Self { child, stdout, stderr, readers }
    }

    /// Everything written to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().expect("stdout lines").join("\n")
    }

    /// Everything written to stderr (the logs) so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lines").join("\n")
    }

    /// The JSON log lines so far, parsed (lines that are not JSON are skipped).
    pub fn log_records(&self) -> Vec<Value> {
        self.stderr.lock().expect("stderr lines").iter().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// Waits until a log record satisfies `matches`, and returns it. Panics with the
    /// output so far if the process exits or `within` passes first.
    pub async fn wait_for_log(&mut self, within: Duration, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(record) = self.log_records().into_iter().find(|record| matches(record)) {
                return record;
            }
            self.fail_if_exited_or_late(deadline, "the expected log line");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until stdout holds a line containing `needle`, and returns that line.
    pub async fn wait_for_stdout(&mut self, within: Duration, needle: &str) -> String {
        let deadline = Instant::now() + within;
        loop {
            let found = self.stdout.lock().expect("stdout lines").iter().find(|line| line.contains(needle)).cloned();
            if let Some(line) = found {
                return line;
            }
            self.fail_if_exited_or_late(deadline, needle);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of `field` in the first log record whose message is `message`.
    pub async fn logged_field(&mut self, within: Duration, message: &str, field: &str) -> String {
        let record = self.wait_for_log(within, |record| record["fields"]["message"] == message).await;
        record["fields"][field]
            .as_str()
            .unwrap_or_else(|| panic!("log record {record} has no string field {field}"))
            .to_owned()
    }

    fn fail_if_exited_or_late(&mut self, deadline: Instant, waiting_for: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the process exited ({status}) while waiting for {waiting_for}\nstdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {waiting_for}\nstdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is running")
    }

    /// Waits (at most `within`) for the process to end by itself.
    pub async fn wait(mut self, within: Duration) -> Ended {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the process did not end within {within:?}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                )
            })
            .expect("wait for the process");
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        Ended { code: status.code(), stdout: self.stdout(), stderr: self.stderr() }
    }

    /// Sends SIGTERM and waits (at most `within`) for the process to exit.
    pub async fn terminate(mut self, within: Duration) -> Ended {
        let pid = self.pid().to_string();
        let kill = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(kill.success(), "kill -TERM {pid} failed");
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("no exit within {within:?} of SIGTERM\nstderr:\n{}", self.stderr()))
            .expect("wait for the process");
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        Ended { code: status.code(), stdout: self.stdout(), stderr: self.stderr() }
    }
}

fn collect(stream: impl AsyncRead + Unpin + Send + 'static, lines: Lines) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().expect("collected lines").push(line);
        }
    })
}

/// Runs `binary args` with only `env` (as [`Service::spawn`]) to its end, at most `within`.
pub async fn run_to_end(binary: &Path, args: &[&str], env: &[(&str, &str)], within: Duration) -> crate::binaries::Run {
    let output = Command::new(binary)
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(within, output)
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish within {within:?}", binary.display()))
        .expect("run the binary");
    crate::binaries::Run::from_output(output)
}

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A scrape of `/metrics`, parsed.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub samples: Vec<Sample>,
    pub text: String,
}

impl Metrics {
    /// Parses the text format (`name{label="value",...} value [timestamp]`); comments
    /// and blank lines are skipped; a line that does not parse fails the test.
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| parse_sample(line).unwrap_or_else(|| panic!("not a Prometheus sample line: {line:?}")))
            .collect();
        Self { samples, text: text.to_owned() }
    }

    /// The samples named `name` whose labels include every one of `labels`.
    pub fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|sample| sample.name == name)
            .filter(|sample| {
                labels.iter().all(|(key, value)| sample.labels.get(*key).map(String::as_str) == Some(*value))
            })
            .collect()
    }

    /// The value of the one sample named `name` whose labels are exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> =
            self.matching(name, labels).into_iter().filter(|sample| sample.labels.len() == labels.len()).collect();
        assert!(found.len() <= 1, "more than one sample {name}{labels:?}:\n{}", self.text);
        found.first().map(|sample| sample.value)
    }

    /// Every label set of `name`, for comparing against what a test expects.
    pub fn label_sets(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.matching(name, &[]).into_iter().map(|sample| sample.labels.clone()).collect()
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(mut inside) = rest.strip_prefix('{') {
        loop {
            inside = inside.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            if let Some(after) = inside.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after_key) = inside.split_once('=')?;
            let mut chars = after_key.strip_prefix('"')?.char_indices();
            let mut value = String::new();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    (at, '"') => break at,
                    (_, other) => value.push(other),
                }
            };
            labels.insert(key.trim().to_owned(), value);
            inside = &after_key[1 + end + 1..];
        }
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample { name, labels, value })
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    #[test]
    fn prometheus_samples_parse_with_braces_and_escapes_inside_label_values() {
        let metrics = Metrics::parse(
            "# TYPE x counter\nx{route=\"/v1/contacts/{id}\",status=\"200\"} 3\ny_bucket{le=\"+Inf\"} 4\nz 1.5\nq{a=\"say \\\"hi\\\"\"} 2\n",
        );

        assert_eq!(metrics.value("x", &[("route", "/v1/contacts/{id}"), ("status", "200")]), Some(3.0));
        assert_eq!(metrics.value("y_bucket", &[("le", "+Inf")]), Some(4.0));
        assert_eq!(metrics.value("z", &[]), Some(1.5));
        assert_eq!(metrics.value("q", &[("a", "say \"hi\"")]), Some(2.0));
    }
}
