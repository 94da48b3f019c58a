//! A TCP forwarder standing for a stable database address (a DNS name, a virtual IP, a
//! proxy): clients connect to one port, and it forwards each connection to the server it
//! points at. Pointed at another server, it cuts every connection it carries, as a virtual
//! IP moving to another host or a proxy failing over does, and forwards the next ones there.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A forwarder on 127.0.0.1; stops, cutting its connections, when dropped.
pub struct Forwarder {
    pub port: u16,
    target: Arc<watch::Sender<u16>>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Forwards to the server on `target` (a port on 127.0.0.1).
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind the forwarder");
        let port = listener.local_addr().expect("the forwarder's address").port();
        let target = Arc::new(watch::Sender::new(target));
        let task = tokio::spawn(accept(listener, target.clone()));
        Self { port, target, task }
    }

    /// From now on forwards to `target`, and cuts every connection it carries.
    pub fn point_at(&self, target: u16) {
        self.target.send_replace(target);
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`, through the forwarder.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        // Every carried connection watches the target and ends when it is gone.
        self.target.send_replace(0);
    }
}

async fn accept(listener: TcpListener, target: Arc<watch::Sender<u16>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let mut moved = target.subscribe();
        let port = *moved.borrow_and_update();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else { return };
            let mut client = client;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                // Pointed elsewhere (or dropped): both sockets close here.
                _ = moved.changed() => {}
            }
        });
    }
}
