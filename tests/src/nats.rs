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
    /// Its name and cluster settings, when it is a node of a [`TestCluster`].
    cluster_args: Vec<String>,
}

impl TestNats {
    pub async fn start() -> Self {
        let mut nats = Self::unstarted(free_port(), Vec::new());
        nats.spawn().await;
        nats
    }

    fn unstarted(port: u16, cluster_args: Vec<String>) -> Self {
        let store = std::env::temp_dir().join(format!("lectern-nats-{}", uuid::Uuid::new_v4().simple()));
        Self { port, url: format!("nats://127.0.0.1:{port}"), store, child: None, cluster_args }
    }

    async fn spawn(&mut self) {
        let child = Command::new(server_binary())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
            .arg(&self.store)
            .args(&self.cluster_args)
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
            crate::process::signal(child.id(), "STOP");
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

/// Three nats-servers routed into one JetStream cluster, each with its own ports and
/// storage, so a test can kill any of them (`kill -9`) and start it again.
pub struct TestCluster {
    pub nodes: Vec<TestNats>,
}

/// The name every node of a [`TestCluster`] is started with, by index.
pub fn node_name(index: usize) -> String {
    format!("lectern-node-{index}")
}

impl TestCluster {
    pub async fn start() -> Self {
        const SIZE: usize = 3;
        let route_ports: Vec<u16> = (0..SIZE).map(|_| free_port()).collect();
        let routes = route_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect::<Vec<_>>().join(",");
        let mut nodes: Vec<TestNats> = route_ports
            .iter()
            .enumerate()
            .map(|(index, route_port)| {
                let cluster_args = [
                    "--name".to_owned(),
                    node_name(index),
                    "--cluster_name".to_owned(),
                    "lectern-test".to_owned(),
                    "--cluster".to_owned(),
                    format!("nats://127.0.0.1:{route_port}"),
                    "--routes".to_owned(),
                    routes.clone(),
                ];
                TestNats::unstarted(free_port(), cluster_args.to_vec())
            })
            .collect();
        for node in &mut nodes {
            node.spawn().await;
        }
        Self { nodes }
    }

    /// Every node's client URL, comma-separated, as `NATS_URL` takes a cluster.
    pub fn urls(&self) -> String {
        self.nodes.iter().map(|node| node.url.clone()).collect::<Vec<_>>().join(",")
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|index| node_name(*index) == name)
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("free port")
}
