//! Every binary of the workspace run as a process under test, started one way:
//! [`Launch`] names the binary, its arguments and the only environment it gets, then
//! [`Launch::spawn`] starts a long-running [`Service`] (`serve`, `run`, `dev`: its output
//! collected line by line as it arrives, its JSON log lines parsed, its signals) or
//! [`Launch::run`] runs a short command to its end. And the Prometheus text an operations
//! listener serves, parsed.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::binaries::{self, Run};

/// One of the workspace's binaries, with its arguments and an environment holding
/// nothing but `NO_COLOR` and what the test adds, so that the runner's own settings
/// (`DATABASE_URL`, `NATS_URL`, `RUST_LOG`, `LECTERN_*`) cannot change what is tested.
/// What the test sets wins over the defaults, and a later setting over an earlier one.
#[derive(Clone, Debug)]
pub struct Launch {
    name: &'static str,
    /// Builds the binary on first use, which may take a while: [`Launch::run`] waits for
    /// it off the test's runtime.
    locate: fn() -> PathBuf,
    args: Vec<String>,
    /// `NO_COLOR=1`, unless the environment is [`Launch::exact_environment`].
    no_color: bool,
    /// See [`Launch::json_logs`].
    json_logs: bool,
    env: Vec<(String, String)>,
    stdin: Option<String>,
}

impl Launch {
    /// `lectern-api`.
    pub fn api() -> Self {
        Self::new("lectern-api", binaries::lectern_api)
    }

    /// `lectern-projector`.
    pub fn projector() -> Self {
        Self::new("lectern-projector", binaries::lectern_projector)
    }

    /// `lectern-dev`.
    pub fn dev() -> Self {
        Self::new("lectern-dev", binaries::lectern_dev)
    }

    /// The binary a command line names (`lectern-api`, `lectern-projector`, `lectern-dev`),
    /// as compose.yaml and the health checks name them.
    pub fn named(name: &str) -> Self {
        match name {
            "lectern-api" => Self::api(),
            "lectern-projector" => Self::projector(),
            "lectern-dev" => Self::dev(),
            other => panic!("{other:?} is not one of Lectern's binaries"),
        }
    }

    fn new(name: &'static str, locate: fn() -> PathBuf) -> Self {
        Self { name, locate, args: Vec::new(), no_color: true, json_logs: false, env: Vec::new(), stdin: None }
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn envs(self, env: &[(&str, &str)]) -> Self {
        env.iter().fold(self, |launch, (name, value)| launch.env(name, value))
    }

    /// JSON log lines at `info` (unless the test sets `RUST_LOG`), which
    /// [`Service::wait_for_log`] and [`Service::log_records`] read; without it a binary
    /// logs plain text.
    pub fn json_logs(mut self) -> Self {
        self.json_logs = true;
        self
    }

    /// The runner's `PATH`, for a binary that looks programs up.
    pub fn runner_path(self) -> Self {
        let path = std::env::var("PATH").unwrap_or_default();
        self.env("PATH", &path)
    }

    /// Exactly `env` and nothing else, not even `NO_COLOR`: the environment a supervisor
    /// such as compose would give the binary.
    pub fn exact_environment<K: AsRef<str>, V: AsRef<str>>(mut self, env: impl IntoIterator<Item = (K, V)>) -> Self {
        self.no_color = false;
        self.json_logs = false;
        self.env = env.into_iter().map(|(name, value)| (name.as_ref().to_owned(), value.as_ref().to_owned())).collect();
        self
    }

    /// `text` on stdin, which is then closed (otherwise stdin is empty).
    pub fn stdin(mut self, text: &str) -> Self {
        self.stdin = Some(text.to_owned());
        self
    }

    fn command(&self, binary: PathBuf) -> Command {
        let mut command = Command::new(binary);
        command.args(&self.args).env_clear();
        if self.no_color {
            command.env("NO_COLOR", "1");
        }
        if self.json_logs {
            command.env("LECTERN_LOG_FORMAT", "json").env("RUST_LOG", "info");
        }
        command
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Starts the binary and returns at once; it is killed when the [`Service`] is dropped.
    pub fn spawn(self) -> Service {
        let mut child = self.command((self.locate)()).spawn().unwrap_or_else(|error| panic!("start {self}: {error}"));
        let stdin = child.stdin.take();
        let stdout = Lines::default();
        let stderr = Lines::default();
        let readers = vec![
            collect(child.stdout.take().expect("piped stdout"), stdout.clone()),
            collect(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        if let (Some(mut input), Some(text)) = (stdin, self.stdin.clone()) {
            tokio::spawn(async move {
                let _ = input.write_all(text.as_bytes()).await;
            });
        }
        Service { child, stdout, stderr, readers, described: self.to_string() }
    }

    /// Runs the binary to its end, failing the test if that takes longer than `within`.
    pub async fn run(self, within: Duration) -> Run {
        let described = self.to_string();
        self.try_run(within).await.unwrap_or_else(|| panic!("{described} did not finish within {within:?}"))
    }

    /// Runs the binary to its end; `None` if it has not ended within `within` (it is
    /// killed then).
    pub async fn try_run(self, within: Duration) -> Option<Run> {
        let binary = tokio::task::spawn_blocking(self.locate).await.expect("build the binary");
        let mut child = self.command(binary).spawn().unwrap_or_else(|error| panic!("start {self}: {error}"));
        if let Some(text) = &self.stdin {
            let mut input = child.stdin.take().expect("piped stdin");
            input.write_all(text.as_bytes()).await.unwrap_or_else(|error| panic!("write {self}'s stdin: {error}"));
            // Dropped here: stdin closes, and the command reads to its end.
        }
        let output = tokio::time::timeout(within, child.wait_with_output()).await.ok()?;
        Some(Run::from_output(output.unwrap_or_else(|error| panic!("wait for {self}: {error}"))))
    }

    /// [`Launch::run`] for a test that is not async, without a time limit.
    pub fn run_blocking(self) -> Run {
        let mut command = self.command((self.locate)()).into_std();
        let output = command.output().unwrap_or_else(|error| panic!("run {self}: {error}"));
        Run::from_output(output)
    }
}

impl fmt::Display for Launch {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.name)?;
        self.args.iter().try_for_each(|arg| write!(formatter, " {arg}"))
    }
}

/// A long-running process of kind `P` ([`crate::serve::Serve`],
/// [`crate::projector::ProjectorProcess`]) about to be started: its settings, then the
/// start `P` defines, which knows when the process is ready and where it listens.
#[derive(Clone, Debug)]
pub struct Starting<P> {
    pub(crate) launch: Launch,
    process: PhantomData<fn() -> P>,
}

impl<P> Starting<P> {
    pub(crate) fn new(launch: Launch) -> Self {
        Self { launch, process: PhantomData }
    }

    /// The environment variable `name` set to `value` (over what is set already).
    pub fn env(self, name: &str, value: &str) -> Self {
        Self::new(self.launch.env(name, value))
    }

    /// Each of `env`, as [`Starting::env`].
    pub fn envs(self, env: &[(&str, &str)]) -> Self {
        Self::new(self.launch.envs(env))
    }
}

/// Sends signal `name` (`TERM`, `KILL`, `STOP`, `CONT`, …) to process `pid` with kill(1),
/// as an operator or a supervisor would; fails the test if it cannot be sent (a
/// PostgreSQL backend is signalled only by root or the postgres user).
pub fn signal(pid: impl fmt::Display, name: &str) {
    let sent = std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status();
    assert!(sent.is_ok_and(|status| status.success()), "kill -{name} {pid} failed");
}

/// Lines written so far to one stream.
type Lines = Arc<Mutex<Vec<String>>>;

/// A running binary, started by [`Launch::spawn`].
pub struct Service {
    child: Child,
    stdout: Lines,
    stderr: Lines,
    readers: Vec<JoinHandle<()>>,
    /// The command line, for messages.
    described: String,
}

impl Service {
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

    /// How many log records so far have `message` as their message.
    pub fn logged(&self, message: &str) -> usize {
        self.log_records().iter().filter(|record| record["fields"]["message"] == message).count()
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
        self.assert_running(&format!("while waiting for {waiting_for}"));
        assert!(Instant::now() < deadline, "timed out waiting for {waiting_for}\n{}", self.output());
    }

    /// How the process ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll the process")
    }

    /// Fails the test, with the output so far, if the process has exited.
    pub fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.exited() {
            panic!("{} exited ({status}) {when}\n{}", self.described, self.output());
        }
    }

    /// The logs so far show no panic.
    pub fn assert_no_panic(&self) {
        let log = self.stderr();
        assert!(!log.contains("panicked"), "{} panicked:\n{log}", self.described);
    }

    fn output(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr())
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is running")
    }

    /// Sends signal `name` (see [`signal`]).
    pub fn signal(&self, name: &str) {
        signal(self.pid(), name);
    }

    /// Waits (at most `within`) for the process to end by itself; the process still
    /// running if it has not.
    pub async fn ended_within(mut self, within: Duration) -> Result<Run, Self> {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("wait for the process"),
            Err(_) => return Err(self),
        };
        for reader in self.readers.drain(..) {
            let _ = reader.await;
        }
        Ok(Run { code: status.code(), stdout: self.stdout(), stderr: self.stderr() })
    }

    /// Waits (at most `within`) for the process to end by itself.
    pub async fn wait(self, within: Duration) -> Run {
        self.ended_within(within).await.unwrap_or_else(|service| {
            panic!("{} did not end within {within:?}\n{}", service.described, service.output())
        })
    }

    /// Sends SIGTERM and waits (at most `within`) for the process to exit.
    pub async fn terminate(self, within: Duration) -> Run {
        self.signal("TERM");
        self.ended_within(within).await.unwrap_or_else(|service| {
            panic!("{} did not exit within {within:?} of SIGTERM\n{}", service.described, service.output())
        })
    }

    /// SIGTERM, as an operator or a supervisor stops a service, and exit 0 within `within`.
    pub async fn stop(self, within: Duration) -> Run {
        let described = self.described.clone();
        let ended = self.terminate(within).await;
        assert_eq!(ended.code, Some(0), "SIGTERM did not end {described} with exit 0:\n{}", ended.stderr);
        ended
    }

    /// SIGKILL: no chance to finish, commit, acknowledge or give anything back; waits (at
    /// most `within`) for the process to be gone.
    pub async fn kill(self, within: Duration) -> Run {
        self.signal("KILL");
        let ended = self.wait(within).await;
        assert_eq!(ended.code, None, "the process was not killed by the signal:\n{}", ended.stderr);
        ended
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
