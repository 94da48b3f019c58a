//! The changes feed's latencies, one event at a time in the big workspace:
//!
//! - publish→visible: a `contact.updated` event published to JetStream, then the feed
//!   polled from the previous token (every millisecond, no `wait`) until a response
//!   holds the contact; the sample ends when that response has arrived.
//! - wake-up: a request with `wait=30` parked first, then an event published; the
//!   sample runs from the commit to that response's arrival. The commit instant is when
//!   this process hears the commit's notification on `lectern_changes` (PostgreSQL
//!   sends it at commit, to the API's listener and to this one alike), matched by the
//!   transaction that last wrote the contact.
//!
//! Each event updates a different contact (version 2), so every event id is new.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lectern_api::reads::change::READ_MODEL_CHANNEL as CHANGES_CHANNEL;
use lectern_api::resources::contacts::Contacts;
use lectern_api::resources::Resource;
use lectern_read_model::CHANGE_TRANSACTION;
use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::feed_client::{poll, Page};
use super::publish::Publisher;
use super::report::millis;
use super::{Context, Result};
use lectern_fixtures::generator::plan::{Entity, Plan, Record};
use lectern_fixtures::generator::records::contact;

/// Samples of each latency: enough for a p99 that is not the maximum.
const SAMPLES: u32 = 300;
/// Between samples, so that each event finds the projector idle, as a lone change would.
const GAP: Duration = Duration::from_millis(20);
/// How long a long poll is given to arrive and park before the event is published.
const PARK: Duration = Duration::from_millis(50);
/// Longer than this and a change is reported as lost, not as a sample.
const GIVE_UP: Duration = Duration::from_secs(10);

/// The 50th and 99th percentiles and the maximum of some samples.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantiles {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Quantiles {
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |quantile: f64| {
            let index = ((samples.len() as f64 * quantile) as usize).min(samples.len().saturating_sub(1));
            samples.get(index).copied().unwrap_or_default()
        };
        Self { count: samples.len(), p50: at(0.50), p99: at(0.99), max: samples.last().copied().unwrap_or_default() }
    }

    fn describe(&self) -> String {
        format!("p50 {}, p99 {}, max {}", millis(self.p50), millis(self.p99), millis(self.max))
    }
}

pub struct FeedLatency {
    /// Published → the response that served it has arrived.
    pub visible: Quantiles,
    /// Of those: published → its commit heard.
    pub to_commit: Quantiles,
    /// And: commit heard → the response that served it has arrived.
    pub commit_to_visible: Quantiles,
    /// A parked long poll: commit heard → its response has arrived.
    pub wake: Quantiles,
    /// And the same long polls from the publish.
    pub wake_from_publish: Quantiles,
    /// Long-poll responses that arrived before this process heard the commit (counted as 0).
    pub wake_before_heard: usize,
}

impl FeedLatency {
    pub fn describe(&self) -> String {
        format!(
            "Feed latencies: {SAMPLES} `contact.updated` events of distinct contacts of the big workspace, one at a \
             time, {} ms apart, each published with an acknowledged JetStream publish. Publish→visible: the feed polled \
             from the previous token every 1 ms until a response holds the contact ({}); of which publish→commit \
             (the commit's notification heard on `{CHANGES_CHANNEL}` by this process) {} and commit→response {}. \
             Wake-up: a `wait=30` request sent {} ms before the publish, timed from the commit's notification to its \
             response ({}; from the publish {}); {} of {} responses arrived before this process heard the \
             notification and count as 0.",
            GAP.as_millis(),
            self.visible.describe(),
            self.to_commit.describe(),
            self.commit_to_visible.describe(),
            PARK.as_millis(),
            self.wake.describe(),
            self.wake_from_publish.describe(),
            self.wake_before_heard,
            self.wake.count,
        )
    }
}

/// A transaction that writes, and so holds a transaction id, in another database of the
/// server at `database_url` until it is closed: what used to hold every feed back.
pub struct ForeignTransaction {
    connection: sqlx::PgConnection,
}

impl ForeignTransaction {
    pub async fn open(database_url: &str) -> Result<Self> {
        use sqlx::Connection;
        let server = database_url.rsplit_once('/').map_or(database_url, |(server, _)| server);
        let mut connection = sqlx::PgConnection::connect(&format!("{server}/postgres"))
            .await
            .context("connect to the server's `postgres` database")?;
        sqlx::raw_sql("begin; create temporary table held_open (n int); insert into held_open values (1)")
            .execute(&mut connection)
            .await
            .context("open a writing transaction in `postgres`")?;
        Ok(Self { connection })
    }

    pub async fn close(mut self) -> Result<()> {
        sqlx::raw_sql("rollback").execute(&mut self.connection).await.context("end the foreign transaction")?;
        Ok(())
    }
}

/// Measures through the API at `base`. Round `round` updates contacts of its own (each
/// round's events are new, so rounds can follow one another in one run).
pub async fn measure(
    plan: &Plan,
    nats_url: &str,
    base: &str,
    key: &str,
    database_url: &str,
    round: u32,
) -> Result<FeedLatency> {
    let big = plan.big();
    let first = round * 2 * SAMPLES;
    if big.contacts < first + 2 * SAMPLES {
        return Err(format!(
            "the big workspace has {} contacts, fewer than {} rounds of {} samples need",
            big.contacts,
            round + 1,
            2 * SAMPLES
        )
        .into());
    }
    let commits = Commits::listen(database_url).await?;
    let mut publisher = Publisher::connect(nats_url).await?;
    let client = reqwest::Client::new();
    let position = Positions {
        pool: sqlx::PgPool::connect(database_url).await.context("connect to read the changes' transactions")?,
        workspace_id: big.id,
    };
    let mut token = poll(&client, base, key, "since=latest").await?.sync_token;

    let (mut visible, mut to_commit, mut commit_to_visible) = (Vec::new(), Vec::new(), Vec::new());
    for index in first..first + SAMPLES {
        tokio::time::sleep(GAP).await;
        let (event, id) = updated(plan, index);
        let published = Instant::now();
        publisher.send(event).await?;
        let page = loop {
            let page = poll(&client, base, key, &format!("since={token}")).await?;
            if page.ids.contains(&id) {
                break page;
            }
            if published.elapsed() > GIVE_UP {
                return Err(
                    format!("contact {id} was not in the feed {GIVE_UP:?} after its event was published").into()
                );
            }
            if !page.ids.is_empty() {
                token = page.sync_token;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let arrived = Instant::now();
        visible.push(arrived - published);
        if let Some(commit) = commits.heard(&position.payload(&id).await?).await {
            to_commit.push(commit.saturating_duration_since(published));
            commit_to_visible.push(arrived.saturating_duration_since(commit));
        }
        token = page.sync_token;
    }

    let (mut wake, mut wake_from_publish, mut before_heard) = (Vec::new(), Vec::new(), 0);
    for index in first + SAMPLES..first + 2 * SAMPLES {
        tokio::time::sleep(GAP).await;
        let (event, id) = updated(plan, index);
        let waiting: JoinHandle<Result<(Page, Instant)>> = {
            let (client, base, key, query) =
                (client.clone(), base.to_owned(), key.to_owned(), format!("since={token}&wait=30"));
            tokio::spawn(async move {
                let page = poll(&client, &base, &key, &query).await?;
                Ok((page, Instant::now()))
            })
        };
        tokio::time::sleep(PARK).await;
        if waiting.is_finished() {
            return Err("a long poll was answered before any change was published".into());
        }
        let published = Instant::now();
        publisher.send(event).await?;
        let answered = tokio::time::timeout(GIVE_UP, waiting)
            .await
            .map_err(|_| format!("a long poll was not answered {GIVE_UP:?} after its change was published"))?;
        let (page, arrived) = answered.map_err(|error| format!("the long poll's task failed: {error}"))??;
        if !page.ids.contains(&id) {
            return Err(format!("a long poll woke without contact {id}: {:?}", page.ids).into());
        }
        let commit = commits
            .heard(&position.payload(&id).await?)
            .await
            .ok_or("the commit's notification was not heard within a second")?;
        if arrived < commit {
            before_heard += 1;
        }
        wake.push(arrived.saturating_duration_since(commit));
        wake_from_publish.push(arrived - published);
        token = page.sync_token;
    }
    publisher.flush().await?;
    Ok(FeedLatency {
        visible: Quantiles::of(visible),
        to_commit: Quantiles::of(to_commit),
        commit_to_visible: Quantiles::of(commit_to_visible),
        wake: Quantiles::of(wake),
        wake_from_publish: Quantiles::of(wake_from_publish),
        wake_before_heard: before_heard,
    })
}

/// The `contact.updated` event (version 2) of the big workspace's contact `index`, and
/// the contact's id as the feed writes it.
fn updated(plan: &Plan, index: u32) -> (lectern_fixtures::generator::records::Event, String) {
    let record = Record { workspace: 0, entity: Entity::Contact, index };
    let mut changed = contact(plan, record);
    changed.phone = Some(format!("+49 30 {}", 2_000_000 + index));
    let event = changed.event(0, index, 2, "updated", chrono::Utc::now().timestamp_millis());
    (event, changed.id.to_string())
}

/// Finds the notification a served change's commit sent.
struct Positions {
    pool: sqlx::PgPool,
    workspace_id: Uuid,
}

impl Positions {
    /// The notification the commit of contact `id`'s last change sent: `<workspace>
    /// <table> <transaction>`.
    async fn payload(&self, id: &str) -> Result<String> {
        let id = Uuid::try_parse(id).map_err(|error| format!("a contact id in the feed: {error}"))?;
        let transaction: i64 = sqlx::query_scalar(&format!(
            "select {CHANGE_TRANSACTION} from contacts where workspace_id = $1 and id = $2"
        ))
        .bind(self.workspace_id)
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .context("read a change's transaction")?;
        Ok(format!("{} {} {transaction}", self.workspace_id, Contacts::NAME))
    }
}

/// The notifications on the changes channel, by payload, with when this process heard each.
struct Commits {
    heard: Arc<Mutex<HashMap<String, Instant>>>,
    task: JoinHandle<()>,
}

impl Commits {
    async fn listen(database_url: &str) -> Result<Self> {
        let mut listener = PgListener::connect(database_url).await.context("connect a LISTEN connection")?;
        listener.listen(CHANGES_CHANNEL).await.context("LISTEN lectern_changes")?;
        let heard: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let writer = heard.clone();
        let task = tokio::spawn(async move {
            // sqlx reconnects a lost listener itself; an error here ends the recording, and
            // the samples then miss their commits, which `heard` reports.
            while let Ok(notification) = listener.recv().await {
                let at = Instant::now();
                writer.lock().unwrap_or_else(PoisonError::into_inner).insert(notification.payload().to_owned(), at);
            }
        });
        Ok(Self { heard, task })
    }

    /// When the notification `payload` was heard, waiting up to a second for it: a
    /// response can arrive before this process has read the notification.
    async fn heard(&self, payload: &str) -> Option<Instant> {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            if let Some(at) = self.heard.lock().unwrap_or_else(PoisonError::into_inner).get(payload) {
                return Some(*at);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Drop for Commits {
    fn drop(&mut self) {
        self.task.abort();
    }
}
