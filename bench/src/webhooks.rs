//! With `--webhooks`: commit → delivery latency of the release API's webhook deliverer.
//!
//! A database of its own (no load, no NATS), [`WORKSPACES`] workspaces with one endpoint
//! each (contacts), registered by the release `lectern-api webhooks create`, all
//! pointing at one receiver on loopback that answers 204 at once (HTTP/1.1, keep-alive,
//! as a receiver behind a load balancer would). The release `lectern-api serve` then
//! delivers while this process commits single-row contact writes as the projector does
//! (`Commit::OnItsOwnBeforeFlush`), one every [`SPACING`], round the workspaces, for the
//! steady phase's length.
//!
//! A sample is one commit: from the moment its statement returned here to the arrival of
//! the first delivery of its workspace that announced it (the delivery log's `through`
//! at or past the commit's transaction, matched by `webhook-id`), so a delivery that was
//! already in flight when the commit landed does not count for it. The baseline is the
//! same commit heard by a plain `LISTEN lectern_changes` connection of this process: what
//! any push built on PostgreSQL's notifications pays before it does anything.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lectern_api::reads::change::READ_MODEL_CHANNEL;
use lectern_read_model::{contacts, Commit, Key, Status};
use lectern_schema::contact::ContactData;
use sqlx::postgres::PgListener;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::feed_latency::Quantiles;
use super::infra::Database;
use super::report::{millis, Report, Row};
use super::{Context, Options, Result};

/// Workspaces written, one endpoint each.
pub const WORKSPACES: usize = 8;
/// Between two commits (each to the next workspace round the list).
pub const SPACING: Duration = Duration::from_millis(10);
/// The target for commit → delivery.
const TARGET_P99: Duration = Duration::from_secs(1);
/// How long the deliveries may take to catch up with the last commit.
const SETTLE_WITHIN: Duration = Duration::from_secs(15);

/// Measures on the database `name` (created here) with the API `api_binary`, its log in
/// `work`.
pub async fn measure(options: &Options, api_binary: &Path, work: &Path, name: &str) -> Result<Report> {
    let database = Database::create(name).await?;
    let server_version: String =
        sqlx::query_scalar("select current_setting('server_version')").fetch_one(&database.pool).await?;
    let receiver = Receiver::start().await?;
    let workspaces: Vec<Uuid> = (0..WORKSPACES).map(|_| Uuid::new_v4()).collect();
    for workspace in &workspaces {
        register(api_binary, &database.url, *workspace, &receiver.url).await?;
    }
    // Registered first, so that the API claims every endpoint at its first round.
    let api = super::api::start_named(
        api_binary,
        &database,
        work,
        "api",
        &[("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1".to_owned())],
    )
    .await?;
    let heard = Heard::listen(&database.url).await?;
    let mut writer = database.pool.acquire().await.context("a connection to write with")?;

    // A few commits first, so that connections and caches are warm when timing starts.
    for (index, workspace) in workspaces.iter().enumerate() {
        write(&mut writer, *workspace, index).await?;
    }
    settle(&database.pool, &receiver, &workspaces).await?;
    let warm_up = receiver.arrivals().len();

    let api_cpu_before = super::machine::cpu_seconds(api.process.pid).unwrap_or_default();
    let began = Instant::now();
    let mut commits = Vec::new();
    let mut next = tokio::time::Instant::now();
    let mut index = 0;
    while began.elapsed() < options.steady_for {
        next += SPACING;
        tokio::time::sleep_until(next).await;
        let workspace = workspaces[index % WORKSPACES];
        let id = write(&mut writer, workspace, WORKSPACES + index).await?;
        commits.push(Written { workspace, id, committed: Instant::now() });
        index += 1;
    }
    let written_for = began.elapsed();
    settle(&database.pool, &receiver, &workspaces).await?;
    let api_cpu = super::machine::cpu_seconds(api.process.pid).unwrap_or_default() - api_cpu_before;

    // What each delivery announced, and when it arrived.
    let announced: Vec<(String, Uuid, i64)> = sqlx::query_as(
        "select d.id, e.workspace_id, d.through from webhook_deliveries d \
         join webhook_endpoints e on e.id = d.endpoint_id where d.state = 'delivered'",
    )
    .fetch_all(&database.pool)
    .await
    .context("read the delivery log")?;
    let arrivals = receiver.arrivals();
    let mut deliveries: HashMap<Uuid, Vec<(i64, Instant)>> = HashMap::new();
    for (id, workspace, through) in announced {
        if let Some(arrived) = arrivals.iter().filter(|(arrived_id, _)| *arrived_id == id).map(|(_, at)| *at).min() {
            deliveries.entry(workspace).or_default().push((through, arrived));
        }
    }
    let mut to_delivery = Vec::new();
    let mut to_heard = Vec::new();
    let mut heard_to_delivery = Vec::new();
    let mut heard_first = 0;
    for commit in &commits {
        let position: i64 = sqlx::query_scalar("select change_xid from contacts where workspace_id = $1 and id = $2")
            .bind(commit.workspace)
            .bind(commit.id)
            .fetch_one(&database.pool)
            .await
            .context("read a commit's transaction")?;
        let delivered = deliveries
            .get(&commit.workspace)
            .and_then(|announced| {
                announced.iter().filter(|(through, _)| *through >= position).map(|(_, arrived)| *arrived).min()
            })
            .ok_or_else(|| format!("no delivery announced the commit of contact {}", commit.id))?;
        to_delivery.push(delivered.saturating_duration_since(commit.committed));
        let payload = format!("{} contacts {position}", commit.workspace);
        if let Some(at) = heard.at(&payload) {
            if at < commit.committed {
                heard_first += 1;
            }
            to_heard.push(at.saturating_duration_since(commit.committed));
            heard_to_delivery.push(delivered.saturating_duration_since(at));
        }
    }
    let deliveries_made = receiver.arrivals().len() - warm_up;
    api.process.stop().await;
    database.pool.close().await;

    let delivery = Quantiles::of(to_delivery);
    let notify = Quantiles::of(to_heard);
    let after_notify = Quantiles::of(heard_to_delivery);
    let mut report = Report::new("Lectern webhook deliveries", "Targets (webhooks)");
    report.header = vec![
        format!(
            "Machine: {}; PostgreSQL {server_version}, shared by the bench, the API and the receiver.",
            super::machine::describe()
        ),
        format!(
            "Data: {WORKSPACES} workspaces with one contacts endpoint each; {} single-row commits, one every {} ms \
             round the workspaces, for {:.1} s.",
            commits.len(),
            SPACING.as_millis(),
            written_for.as_secs_f64()
        ),
        format!("Command: `{}`", options.command_line),
    ];
    report.rows.push(Row {
        scenario: "commit → delivery received".to_owned(),
        lectern: millis(delivery.p50),
        baseline: millis(notify.p50),
        ratio: None,
        p50: millis(delivery.p50),
        p99: millis(delivery.p99),
        rss: "–".to_owned(),
    });
    report.rows.push(Row {
        scenario: "baseline: commit → NOTIFY heard by a plain LISTEN".to_owned(),
        lectern: "–".to_owned(),
        baseline: millis(notify.p50),
        ratio: None,
        p50: millis(notify.p50),
        p99: millis(notify.p99),
        rss: "–".to_owned(),
    });
    report.rows.push(Row {
        scenario: "NOTIFY heard → delivery received".to_owned(),
        lectern: millis(after_notify.p50),
        baseline: "–".to_owned(),
        ratio: None,
        p50: millis(after_notify.p50),
        p99: millis(after_notify.p99),
        rss: "–".to_owned(),
    });
    report.targets.push((
        format!("commit → delivery p99 < {}", millis(TARGET_P99)),
        delivery.p99 < TARGET_P99,
        format!("p99 {} (p50 {}, max {})", millis(delivery.p99), millis(delivery.p50), millis(delivery.max)),
    ));
    report.notes = vec![
        format!(
            "A sample runs from the commit's statement returning in the bench to the arrival at the receiver of the \
             first delivery of its workspace whose `through` (the delivery log) is at or past the commit's \
             transaction; {} samples, max {}.",
            delivery.count,
            millis(delivery.max)
        ),
        format!(
            "Baseline: the same commits heard on `{READ_MODEL_CHANNEL}` by a plain LISTEN connection of the bench \
             ({} samples, max {}); {heard_first} notifications arrived before the commit's statement returned and \
             count as 0.",
            notify.count,
            millis(notify.max)
        ),
        format!(
            "{deliveries_made} deliveries for {} commits (coalescing: a commit made while its endpoint's attempt \
             was in flight rides on the next one); the API used {:.2} s of CPU over the phase.",
            commits.len(),
            api_cpu
        ),
        "The receiver answers 204 at once; the deliverer's lease is the default (15 s), claimed at start.".to_owned(),
    ];
    Ok(report)
}

/// One commit of the steady phase.
struct Written {
    workspace: Uuid,
    id: Uuid,
    committed: Instant,
}

/// One new contact of `workspace`, a statement of its own, as the projector commits.
async fn write(connection: &mut sqlx::PgConnection, workspace: Uuid, index: usize) -> Result<Uuid> {
    let id = Uuid::new_v4();
    let data = ContactData::new(format!("Webhook bench {index:06}"), chrono::Utc::now().into());
    let mut batch = contacts::Batch::default();
    batch.push(Key { workspace_id: workspace, id, version: 1, status: Status::Active }, Some(&data));
    batch.write(connection, Commit::OnItsOwnBeforeFlush).await.context("write a contact")?;
    Ok(id)
}

/// `lectern-api webhooks create` for `workspace`'s contacts.
async fn register(api: &Path, database_url: &str, workspace: Uuid, url: &str) -> Result<()> {
    let output = tokio::process::Command::new(api)
        .args(["webhooks", "create", "--workspace", &workspace.to_string(), "--url", url, "--resource", "contacts"])
        .env_clear()
        .env("DATABASE_URL", database_url)
        .env("LECTERN_KEY_PEPPER", super::api::PEPPER)
        .env("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1")
        .kill_on_drop(true)
        .output()
        .await
        .context("run lectern-api webhooks create")?;
    if !output.status.success() {
        return Err(format!("webhooks create failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(())
}

/// Waits until every workspace's newest commit was announced by a delivery.
async fn settle(pool: &sqlx::PgPool, receiver: &Receiver, workspaces: &[Uuid]) -> Result<()> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let behind: i64 = sqlx::query_scalar(
            "select count(*) from unnest($1::uuid[]) w(id) \
             where (select coalesce(max(change_xid), 0) from contacts c where c.workspace_id = w.id) > \
                   (select coalesce(max(d.through), 0) from webhook_deliveries d \
                    join webhook_endpoints e on e.id = d.endpoint_id \
                    where e.workspace_id = w.id and d.state = 'delivered')",
        )
        .bind(workspaces)
        .fetch_one(pool)
        .await
        .context("read the delivery log")?;
        if behind == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{behind} workspaces' newest commits were not announced within {SETTLE_WITHIN:?} ({} deliveries \
                 received)",
                receiver.arrivals().len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Notifications on the changes channel by payload, with when this process heard each.
struct Heard {
    heard: Arc<Mutex<HashMap<String, Instant>>>,
    task: JoinHandle<()>,
}

impl Heard {
    async fn listen(database_url: &str) -> Result<Self> {
        let mut listener = PgListener::connect(database_url).await.context("connect a LISTEN connection")?;
        listener.listen(READ_MODEL_CHANNEL).await.context("LISTEN lectern_changes")?;
        let heard: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let writer = heard.clone();
        let task = tokio::spawn(async move {
            // An error ends the recording; the samples then lack their baseline, which the
            // report's counts show.
            while let Ok(notification) = listener.recv().await {
                let at = Instant::now();
                writer.lock().unwrap_or_else(PoisonError::into_inner).insert(notification.payload().to_owned(), at);
            }
        });
        Ok(Self { heard, task })
    }

    fn at(&self, payload: &str) -> Option<Instant> {
        self.heard.lock().unwrap_or_else(PoisonError::into_inner).get(payload).copied()
    }
}

impl Drop for Heard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A receiver on loopback: records each delivery's `webhook-id` and arrival, answers 204
/// at once, and keeps the connection open for the next one.
struct Receiver {
    url: String,
    arrivals: Arc<Mutex<Vec<(String, Instant)>>>,
    task: JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("bind the receiver")?;
        let url = format!("http://{}/hooks", listener.local_addr()?);
        let arrivals: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let recording = arrivals.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, recording.clone()));
            }
        });
        Ok(Self { url, arrivals, task })
    }

    fn arrivals(&self) -> Vec<(String, Instant)> {
        self.arrivals.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection's requests, until the sender closes it.
async fn serve(mut stream: TcpStream, arrivals: Arc<Mutex<Vec<(String, Instant)>>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0; 8192];
    loop {
        let end = loop {
            if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                break end;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        };
        let arrived = Instant::now();
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let header = |name: &str| {
            head.lines().skip(1).find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
            })
        };
        let length: usize = header("content-length").and_then(|length| length.parse().ok()).unwrap_or(0);
        let id = header("webhook-id").unwrap_or_default();
        while buffer.len() < end + 4 + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
        buffer.drain(..end + 4 + length);
        arrivals.lock().unwrap_or_else(PoisonError::into_inner).push((id, arrived));
        if stream.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").await.is_err() {
            return;
        }
    }
}
