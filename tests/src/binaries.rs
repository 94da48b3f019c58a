//! The workspace's real binaries, built on first use if the test run has not built them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

static API: OnceLock<PathBuf> = OnceLock::new();
static PROJECTOR: OnceLock<PathBuf> = OnceLock::new();
static DEV: OnceLock<PathBuf> = OnceLock::new();

/// Path to `lectern-api` in this build's target directory.
pub fn lectern_api() -> PathBuf {
    API.get_or_init(|| built("lectern-api")).clone()
}

/// Path to `lectern-projector` in this build's target directory.
pub fn lectern_projector() -> PathBuf {
    PROJECTOR.get_or_init(|| built("lectern-projector")).clone()
}

/// Path to `lectern-dev` in this build's target directory.
pub fn lectern_dev() -> PathBuf {
    DEV.get_or_init(|| built("lectern-dev")).clone()
}

/// Runs the binaries already built in `directory` (a release build's, for the benchmark's
/// nemesis) instead of building this run's. Only before the first binary is located.
pub fn use_built_in(directory: &Path) {
    let _ = API.set(directory.join("lectern-api"));
    let _ = PROJECTOR.set(directory.join("lectern-projector"));
    let _ = DEV.set(directory.join("lectern-dev"));
}

fn built(name: &str) -> PathBuf {
    // target/<profile>/deps/<test binary> → target/<profile>/<name>
    let profile_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(|deps| deps.parent()).map(PathBuf::from))
        .expect("test binary lives in target/<profile>/deps");
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "-p", name, "--bin", name]);
    // `cargo test` sets the package's variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, …) for
    // the test process; inherited, they differ from the outer build's and make ring's build
    // script (which watches them) run again, rebuilding the TLS stack and the binaries on
    // every run. Cargo's own settings (CARGO_HOME, CARGO_TARGET_DIR, …) stay.
    for (variable, _) in std::env::vars_os() {
        let variable = variable.to_string_lossy();
        if variable.starts_with("CARGO_PKG_")
            || variable.starts_with("CARGO_MANIFEST_")
            || ["CARGO_CRATE_NAME", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"].contains(&variable.as_ref())
        {
            build.env_remove(variable.as_ref());
        }
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "building {name} failed");
    profile_dir.join(name)
}

/// What a finished run of one of the binaries left behind.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(output: Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    pub fn assert_success(&self) {
        assert_eq!(self.code, Some(0), "expected exit 0: {self:#?}");
        self.assert_no_panic();
    }

    pub fn assert_no_panic(&self) {
        assert!(!self.stderr.contains("panicked"), "the binary panicked: {}", self.stderr);
    }

    /// The lines of stderr that are the error report (logs are other lines).
    pub fn error_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|line| line.starts_with("error")).collect()
    }

    /// Exit `code` (any failure when `None`) with exactly one error line, which
    /// contains every one of `needles`.
    pub fn assert_one_line_error(&self, code: Option<i32>, needles: &[&str]) {
        match code {
            Some(code) => assert_eq!(self.code, Some(code), "expected exit {code}: {self:#?}"),
            None => assert!(self.code.is_some_and(|code| code != 0), "expected a failure exit: {self:#?}"),
        }
        self.assert_no_panic();
        let lines = self.error_lines();
        assert_eq!(lines.len(), 1, "expected one error line: {}", self.stderr);
        for needle in needles {
            assert!(lines[0].contains(needle), "error line does not name {needle:?}: {}", lines[0]);
        }
    }

    /// stdout as one JSON document.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|error| panic!("stdout is not one JSON document ({error}): {}", self.stdout))
    }
}
