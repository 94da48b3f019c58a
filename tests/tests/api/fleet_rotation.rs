//! The cursor-secret rotation as a fleet runs it: two `serve` processes behind a balancer
//! that sends each request to a process whose `/readyz` said ready, taking turns; each step
//! of the operations guide is a rolling restart, one process after the other, while a
//! client follows the changes feed and pages through the listing, and a writer keeps the
//! feed moving. Tokens and cursors cross between processes at every point of every step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lectern_api::keys::Scope;
use lectern_api::signing::fingerprint;
use lectern_tests::app::urlencode;
use lectern_tests::seed::{create_key, ContactSeed};
use lectern_tests::serve::Serve;
use lectern_tests::TestDatabase;
use secrecy::SecretString;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::shutdown::check_readiness;

const BEFORE: &str = "the fleet cursor secret before the rotation: 32+ bytes";
const AFTER: &str = "the fleet cursor secret after the rotation: 32+ bytes";
const METRIC: &str = "lectern_api_previous_cursor_secret_verifications_total";

/// What the syncing client met.
#[derive(Debug, Default)]
struct Seen {
    /// Pages answered 200, per process.
    served: [u64; 2],
    /// A token or cursor refused (400): the client would have to start over.
    start_overs: Vec<String>,
    /// Anything else that was not a 200, a refused connection included.
    failures: Vec<String>,
}

/// Two processes on fixed addresses, restarted in place.
struct Fleet {
    database_url: String,
    processes: [Option<Serve>; 2],
    addresses: [String; 2],
    ready: Arc<[AtomicBool; 2]>,
}

impl Fleet {
    async fn start(database_url: &str, secrets: &[(&str, &str)]) -> Self {
        let mut processes = [None, None];
        for process in &mut processes {
            *process = Some(serve(database_url, secrets, None).await);
        }
        let addresses = processes.each_ref().map(|process| process.as_ref().expect("started").api.clone());
        let ready = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        Self { database_url: database_url.to_owned(), processes, addresses, ready }
    }

    /// One step of the guide: each process stopped (SIGTERM, its grace) and started again
    /// with `secrets`, the next one only once the balancer sees it ready.
    async fn restart_one_by_one(&mut self, secrets: &[(&str, &str)]) {
        for index in 0..2 {
            let stopping = self.processes[index].take().expect("running");
            stopping.stop().await;
            self.processes[index] = Some(serve(&self.database_url, secrets, Some(&self.addresses[index])).await);
            self.wait_until_ready(index).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn wait_until_ready(&self, index: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !self.ready[index].load(Ordering::Acquire) {
            assert!(tokio::time::Instant::now() < deadline, "process {index} never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The previous secret's verifications, summed over the fleet.
    async fn verified_by(&self, secret_fingerprint: &str) -> f64 {
        let mut total = 0.0;
        for process in self.processes.iter().flatten() {
            let metrics = process.metrics().await;
            let value = metrics.value(METRIC, &[("secret", secret_fingerprint)]);
            total += value.unwrap_or_else(|| panic!("no {METRIC} for {secret_fingerprint} on a process that lists it"));
        }
        total
    }
}

async fn serve(database_url: &str, secrets: &[(&str, &str)], listen: Option<&str>) -> Serve {
    let mut options = Serve::on(database_url).envs(&[
        ("LECTERN_SHUTDOWN_GRACE_MS", "1000"),
        ("LECTERN_RATE_LIMIT_PER_MINUTE", "60000000"),
        ("LECTERN_RATE_LIMIT_BURST", "1000000"),
    ]);
    options = options.envs(secrets);
    if let Some(address) = listen {
        options = options.env("LECTERN_LISTEN", address);
    }
    options.start().await
}

/// Follows the feed and pages through the listing, each request to the next ready process;
/// a refused connection is tried once on the other (and counted).
fn sync(addresses: [String; 2], key: String, ready: Arc<[AtomicBool; 2]>, stop: CancellationToken) -> JoinHandle<Seen> {
    // Idle connections expire before a stopping process closes them, as a balancer's do.
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_millis(300))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client");
    tokio::spawn(async move {
        let mut seen = Seen::default();
        let (mut token, mut cursor): (Option<String>, Option<String>) = (None, None);
        let mut round = 0_usize;
        while !stop.is_cancelled() {
            round += 1;
            for feed in [true, false] {
                // Each of the feed and the listing alternates between the processes.
                let turn = (round + usize::from(!feed)) % 2;
                let Some(target) = [turn, 1 - turn].into_iter().find(|index| ready[*index].load(Ordering::Acquire))
                else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let path = match (feed, &token, &cursor) {
                    (true, Some(token), _) => format!("/v1/contacts/changes?limit=20&since={}", urlencode(token)),
                    (true, None, _) => "/v1/contacts/changes?limit=20".to_owned(),
                    (false, _, Some(cursor)) => format!("/v1/contacts?limit=3&cursor={}", urlencode(cursor)),
                    (false, _, None) => "/v1/contacts?limit=3".to_owned(),
                };
                let send = |index: usize| {
                    let address: &str = &addresses[index];
                    http.get(format!("http://{address}{path}")).header("X-API-Key", key.as_str()).send()
                };
                let (index, answer) = match send(target).await {
                    Err(error) if error.is_connect() => {
                        seen.failures.push(format!("process {target} refused the connection: {error}"));
                        (1 - target, send(1 - target).await)
                    }
                    answer => (target, answer),
                };
                let (status, body) = match answer {
                    Ok(answer) => (answer.status().as_u16(), answer.json::<Value>().await.unwrap_or(Value::Null)),
                    Err(error) => {
                        seen.failures.push(format!("process {index}: {error}"));
                        continue;
                    }
                };
                match status {
                    200 if feed => {
                        seen.served[index] += 1;
                        token = body["syncToken"].as_str().map(str::to_owned);
                    }
                    200 => {
                        seen.served[index] += 1;
                        cursor = body["page"]["nextCursor"].as_str().map(str::to_owned);
                    }
                    400 => seen.start_overs.push(format!("process {index}, {path}: {body}")),
                    other => seen.failures.push(format!("process {index}, {path}: {other} {body}")),
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        seen
    })
}

/// Rule: the guide's cursor-secret rotation, run on a fleet of two processes restarted one
/// by one for each step, makes no client start over and fails no request: step 1 lists the
/// new secret as previous everywhere, step 2 swaps them, step 4 removes the old one once
/// `lectern_api_previous_cursor_secret_verifications_total` for its fingerprint stopped
/// moving (step 3). That series exists at 0 before any token verifies under it, moves while
/// the old secret's tokens are in use, and stops once every client holds only new ones.
#[tokio::test]
async fn a_fleet_restarted_one_by_one_through_every_step_of_the_cursor_secret_rotation_starts_no_client_over() {
    let db = TestDatabase::create().await;
    let workspace = Uuid::new_v4();
    let (_, key) = create_key(&db.pool, workspace, &[Scope::ContactsRead]).await;
    for index in 0..10 {
        ContactSeed::named(&format!("Before {index:02}")).insert(&db.pool, workspace).await;
    }
    let stop = CancellationToken::new();
    let writer = {
        let (pool, stop) = (db.pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut written = 0;
            while !stop.is_cancelled() {
                ContactSeed::named(&format!("During {written:04}")).insert(&pool, workspace).await;
                written += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut fleet = Fleet::start(&db.url, &[("LECTERN_CURSOR_SECRET", BEFORE)]).await;
    let checker = tokio::spawn(check_readiness(
        reqwest::Client::new(),
        fleet.addresses.clone(),
        fleet.ready.clone(),
        stop.clone(),
    ));
    fleet.wait_until_ready(0).await;
    fleet.wait_until_ready(1).await;
    let client = sync(fleet.addresses.clone(), key, fleet.ready.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = fingerprint(&SecretString::from(BEFORE.to_owned()));
    let after = fingerprint(&SecretString::from(AFTER.to_owned()));

    // Step 1: the new secret accepted everywhere, still signing with the old one.
    fleet.restart_one_by_one(&[("LECTERN_CURSOR_SECRET", BEFORE), ("LECTERN_PREVIOUS_CURSOR_SECRETS", AFTER)]).await;
    assert_eq!(fleet.verified_by(&after).await, 0.0, "nothing is signed with the new secret before step 2");
    // Step 2: the swap.
    fleet.restart_one_by_one(&[("LECTERN_CURSOR_SECRET", AFTER), ("LECTERN_PREVIOUS_CURSOR_SECRETS", BEFORE)]).await;
    let moved = fleet.verified_by(&before).await;
    assert!(moved > 0.0, "the old secret's tokens were used during the swap, and its counter never moved");
    // Step 3: every client now holds only tokens and cursors of the new secret.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet.verified_by(&before).await, moved, "the old secret still verifies after every client moved on");
    // Step 4: the old secret removed.
    fleet.restart_one_by_one(&[("LECTERN_CURSOR_SECRET", AFTER)]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    stop.cancel();
    let seen = client.await.expect("the client");
    checker.await.expect("the readiness checker");
    writer.await.expect("the writer");
    assert!(seen.start_overs.is_empty(), "{} start-overs: {:#?}", seen.start_overs.len(), seen.start_overs);
    assert!(seen.failures.is_empty(), "{} requests failed: {:#?}", seen.failures.len(), seen.failures);
    assert!(seen.served.iter().all(|served| *served > 50), "a process served (almost) nothing: {:?}", seen.served);
}
