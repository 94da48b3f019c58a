//! A private nats-server with JetStream per test, on a free port in a temporary
//! directory, so tests can stop, kill and restart it without touching the shared one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nats-server binary (`LECTERN_TEST_NATS_SERVER` overrides).
pub fn server_binary() -> PathBuf {
    std::env::var_os("LECTERN_TEST_NATS_SERVER").map_or_else(|| PathBuf::from("/usr/sbin/nats-server"), PathBuf::from)
}

/// A running nats-server; killed, and its storage removed, when dropped.
pub struct TestNats {
    pub port: u16,
    pub url: String,
    store: PathBuf,
    child: Option<Child>,
}

impl TestNats {
    pub async fn start() -> Self {
        let port = free_port();
        let store = std::env::temp_dir().join(format!("lectern-nats-{}", uuid::Uuid::new_v4().simple()));
        let mut nats = Self { port, url: format!("nats://127.0.0.1:{port}"), store, child: None };
        nats.spawn().await;
        nats
    }

    async fn spawn(&mut self) {
        let child = Command::new(server_binary())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start on port {}", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the server (SIGKILL) and waits for it to be gone; its storage stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is read or answered.
    pub fn freeze(&self) {
        if let Some(child) = &self.child {
            let frozen = Command::new("kill").args(["-STOP", &child.id().to_string()]).status();
            assert!(frozen.is_ok_and(|status| status.success()), "kill -STOP nats-server");
        }
    }

    /// Starts the server again on the same port with the same storage.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// A client of this server.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(&self.url).await.expect("connect to the test nats-server")
    }
}

impl Drop for TestNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("free port")
}
