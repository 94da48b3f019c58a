//! The workspace's real binaries, built on first use if the test run has not built them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

static BUILT: OnceLock<PathBuf> = OnceLock::new();

/// Path to `lectern-api` in this build's target directory.
pub fn lectern_api() -> PathBuf {
    BUILT
        .get_or_init(|| {
            // target/<profile>/deps/<test binary> → target/<profile>/lectern-api
            let profile_dir = std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().and_then(|deps| deps.parent()).map(PathBuf::from))
                .expect("test binary lives in target/<profile>/deps");
            let status = Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "lectern-api", "--bin", "lectern-api"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building lectern-api failed");
            profile_dir.join("lectern-api")
        })
        .clone()
}
