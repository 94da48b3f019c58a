//! A burst of new connections while the API is not accepting (a process starved of CPU
//! for a moment, here stopped with SIGSTOP): the kernel completes the handshakes on its
//! behalf, up to the listen backlog the API asked for (capped at `net.core.somaxconn`),
//! and each is served once the API runs again.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Served, WITHIN};

/// Connects in the burst: several times the 128 a plain tokio listener asks for, within
/// the 4,096 Linux allows by default.
const BURST: usize = 600;

/// How long a connect may take while the API is stopped: a SYN the kernel dropped for a
/// full queue is sent again only after a second, then three.
const CONNECT_WITHIN: Duration = Duration::from_millis(2_500);

/// The rule: while the API is not accepting, the kernel holds a burst of 600 connects
/// for it (none waits for a SYN to be sent again), and every one is served afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connects_while_the_api_is_not_accepting_is_held_for_it_and_served() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .expect("read net.core.somaxconn");
    assert!(somaxconn >= BURST, "net.core.somaxconn is {somaxconn}: this host cannot hold a burst of {BURST}");
    let served = Served::start_with(60_000, &[("LECTERN_MAX_CONNECTIONS", "2000")]).await;
    let service = &served.serve.service;

    service.signal("STOP");
    let connects =
        (0..BURST).map(|_| async { tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(served.address)).await });
    let outcomes = join_all(connects).await;
    service.signal("CONT");

    let connected: Vec<TcpStream> = outcomes.into_iter().filter_map(|outcome| outcome.ok()?.ok()).collect();
    assert_eq!(connected.len(), BURST, "connects completed while the API was not accepting");
    let answers = join_all(connected.into_iter().map(|mut stream| async move {
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: lectern.test\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        tokio::time::timeout(WITHIN, stream.read_to_end(&mut answer)).await.ok()?.ok()?;
        Some(answer)
    }))
    .await;
    let served_ok = answers.iter().flatten().filter(|answer| answer.starts_with(b"HTTP/1.1 200")).count();
    assert_eq!(served_ok, BURST, "connections of the burst answered 200 once the API ran again");
    served.assert_no_panic();
}
