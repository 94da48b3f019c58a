//! The workspace's real binaries, built on first use if the test run has not built them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

static API: OnceLock<PathBuf> = OnceLock::new();
static PROJECTOR: OnceLock<PathBuf> = OnceLock::new();

/// Path to `lectern-api` in this build's target directory.
pub fn lectern_api() -> PathBuf {
    API.get_or_init(|| built("lectern-api")).clone()
}

/// Path to `lectern-projector` in this build's target directory.
pub fn lectern_projector() -> PathBuf {
    PROJECTOR.get_or_init(|| built("lectern-projector")).clone()
}

fn built(name: &str) -> PathBuf {
    // target/<profile>/deps/<test binary> → target/<profile>/<name>
    let profile_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(|deps| deps.parent()).map(PathBuf::from))
        .expect("test binary lives in target/<profile>/deps");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", name, "--bin", name])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building {name} failed");
    profile_dir.join(name)
}
