//! The changes feed's convergence rule, end to end: a client that starts without
//! `since`, applies every page in order (upsert on `upserted`, delete on `removed`) and
//! follows its tokens until `hasMore` is false holds exactly the records active at its
//! last token's position, whatever was written meanwhile, in whatever order events
//! arrived, and however many projectors wrote at once.
//!
//! Everything is real: a private nats-server, a database of the test's own, the API over
//! HTTP, and three projectors' run loops on the one durable consumer, each with a pool of
//! its own, as three processes would have them. (Not `lectern-projector run` itself:
//! building it from inside a test leaks `CARGO_MANIFEST_DIR` into cargo, which rebuilds
//! ring and everything above it, here and again in the next `cargo test`.)

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lectern_api::keys::Scope;
use lectern_projector::daemon::consumer::{pool_for, RunSettings};
use lectern_projector::stream::{CONSUMER, STREAM};
use lectern_tests::app::{urlencode, TestApp};
use lectern_tests::history::{random_history_of, HistoryEvent, Rng};
use lectern_tests::nats::TestNats;
use lectern_tests::projector::{eventually, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Seeds run by default; `LECTERN_FEED_SEED=<n>` runs one. A seed fixes the history,
/// its arrival order and the client's choices; which batch commits when is up to the
/// scheduler, so a seed reproduces a failure often rather than always.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=12;
/// How long the projectors may take to apply one seed's history.
const CATCH_UP: Duration = Duration::from_secs(60);
/// How long the listing may lag the read model (its first pages are cached until the
/// change notification arrives).
const LISTING_CATCH_UP: Duration = Duration::from_secs(10);
/// A client following to the end takes far fewer pages than this; more means a loop.
const MAX_PAGES: usize = 10_000;
const FEEDS: [&str; 2] = ["contacts", "items"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_following_the_feed_to_its_end_holds_exactly_the_active_records_whatever_was_written_meanwhile() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    // Small batches, two at once per projector, so that batches of both workspaces and
    // both tables interleave and race for the same workspace's positions.
    let settings = || RunSettings { batch_size: 4, concurrent_batches: 2, ..RunSettings::default() };
    let own_pool = || pool_for(&db.url, 2).expect("projector pool");
    let projectors = [
        RunningProjector::start_consuming_with(&nats.url, own_pool(), settings()).await,
        RunningProjector::start_consuming_with(&nats.url, own_pool(), settings()).await,
        RunningProjector::start_consuming_with(&nats.url, own_pool(), settings()).await,
    ];
    let jetstream = jetstream::new(nats.client().await);
    // All three pull before anything is published, or the first could take it all.
    let all_pulling = eventually(CATCH_UP, || pullers_waiting(&jetstream, projectors.len())).await;
    assert!(all_pulling, "the three projectors are not all pulling from the consumer");
    let app = TestApp::spawn(db.pool.clone()).await;

    let seeds: Vec<u64> = match std::env::var("LECTERN_FEED_SEED") {
        Ok(seed) => vec![seed.parse().expect("LECTERN_FEED_SEED is a number")],
        Err(_) => SEEDS.collect(),
    };
    for seed in seeds {
        check_seed(seed, &app, &jetstream, &db.pool).await;
    }

    for projector in projectors {
        projector.stop().await;
    }
}

/// One seed's world: who is watched, and whose ids must never show.
struct World {
    seed: u64,
    watched: Uuid,
    other: Uuid,
    /// The watched workspace's ids, per feed: a feed serves no other.
    own: HashMap<&'static str, HashSet<String>>,
    /// The other workspace's ids, of both tables.
    others: HashSet<String>,
    /// Each entity's events in version order, for the failure report.
    histories: HashMap<String, Vec<HistoryEvent>>,
}

/// One feed as the client follows it.
struct Feed {
    segment: &'static str,
    token: Option<String>,
    /// What the client holds: id → the record as the feed served it.
    mirror: HashMap<String, Value>,
    /// Every change the client applied, per id, for the failure report.
    seen: HashMap<String, Vec<String>>,
    pages: usize,
}

impl Feed {
    fn new(segment: &'static str) -> Self {
        Self { segment, token: None, mirror: HashMap::new(), seen: HashMap::new(), pages: 0 }
    }
}

async fn check_seed(seed: u64, app: &TestApp, jetstream: &jetstream::Context, pool: &PgPool) {
    let mut rng = Rng::seeded(seed);
    let (watched, other) = (rng.uuid(), rng.uuid());
    let watched_history = random_history_of(&mut rng, 6, 5, 8);
    let other_history = random_history_of(&mut rng, 4, 3, 6);

    // Both workspaces' events with duplicates, shuffled together: a batch holds either
    // workspace and either table, and versions arrive in any order.
    let mut arrivals: Vec<(Uuid, HistoryEvent)> = watched_history
        .iter()
        .map(|event| (watched, event.clone()))
        .chain(other_history.iter().map(|event| (other, event.clone())))
        .collect();
    for _ in 0..rng.below(arrivals.len() / 2 + 1) {
        let duplicate = rng.pick(&arrivals).clone();
        arrivals.push(duplicate);
    }
    rng.shuffle(&mut arrivals);

    let mut last: HashMap<(Uuid, Uuid), HistoryEvent> = HashMap::new();
    for (workspace, event) in &arrivals {
        let newest = last.entry((*workspace, event.entity)).or_insert_with(|| event.clone());
        if event.version > newest.version {
            *newest = event.clone();
        }
    }
    let mut world = World {
        seed,
        watched,
        other,
        own: FEEDS.iter().map(|segment| (*segment, HashSet::new())).collect(),
        others: other_history.iter().map(|event| event.entity.to_string()).collect(),
        histories: HashMap::new(),
    };
    for event in &watched_history {
        world.own.get_mut(event.segment).expect("a feed").insert(event.entity.to_string());
        world.histories.entry(event.entity.to_string()).or_default().push(event.clone());
    }

    let key = app.key(watched, &[Scope::ContactsRead, Scope::ItemsRead]).await;
    let mut feeds = FEEDS.map(Feed::new);
    let written = Instant::now();
    let mut client_rng = Rng::seeded(seed ^ 0xFEED);
    let stop = CancellationToken::new();
    let writer = async {
        let mut publish_rng = Rng::seeded(seed ^ 0xC0FFEE);
        for (workspace, event) in &arrivals {
            let payload = event.envelope(*workspace).to_string();
            let acked = jetstream.publish(event.subject(*workspace), payload.into()).await.expect("publish");
            acked.await.expect("publish ack");
            // A pause now and then, so that pages are read between commits too.
            if publish_rng.below(3) == 0 {
                tokio::time::sleep(Duration::from_millis(1 + publish_rng.below(30) as u64)).await;
            }
        }
        wait_until_applied(seed, pool, jetstream, &last).await;
        stop.cancel();
    };
    tokio::join!(follow_while_written(app, &key, &mut feeds, &world, &mut client_rng, &stop), writer);

    // How much the client read while the writes went on: the interleaving this seed tested.
    eprintln!(
        "seed {seed}: {} events applied in {:.1?}; the client read {} contacts and {} items pages meanwhile",
        arrivals.len(),
        written.elapsed(),
        feeds[0].pages,
        feeds[1].pages
    );
    // Nothing is written any more: following to the end must reach the final state. The
    // API hears of a commit a moment after it (its LISTEN connection), and until then an
    // empty poll answered from memory finds nothing after the token: late, not lost, as a
    // client polling again later finds. A change the feed skipped, no later poll brings
    // back, so the client follows again until the listing's own catch-up deadline.
    let deadline = Instant::now() + LISTING_CATCH_UP;
    loop {
        for feed in &mut feeds {
            let mut pages = 0;
            while poll(app, &key, feed, 1 + client_rng.below(3), 0, &world).await {
                pages += 1;
                assert!(pages < MAX_PAGES, "seed {seed}: the {} feed's hasMore never ends", feed.segment);
            }
        }
        let mut diverged = String::new();
        for feed in &feeds {
            let expected: HashSet<String> = last
                .iter()
                .filter(|((workspace, _), event)| *workspace == watched && event.segment == feed.segment)
                .filter(|(_, event)| event.leaves_active())
                .map(|((_, entity), _)| entity.to_string())
                .collect();
            let listed = listing_of(app, &key, feed.segment, &expected, seed).await;
            diverged.push_str(&differences(feed, &listed, &world));
        }
        if diverged.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "seed {seed}: the client's mirror is not the listing\n{diverged}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The client during the writes: either feed, at random, 1 to 3 changes a page, now and
/// then a long poll once caught up, until `stop`.
async fn follow_while_written(
    app: &TestApp,
    key: &str,
    feeds: &mut [Feed; 2],
    world: &World,
    rng: &mut Rng,
    stop: &CancellationToken,
) {
    let mut caught_up = [false; 2];
    while !stop.is_cancelled() {
        let which = rng.below(2);
        let limit = 1 + rng.below(3);
        // A long poll must wake for the next commit of its feed, and miss nothing of it.
        let wait = u64::from(caught_up[which] && rng.below(3) == 0);
        let has_more = tokio::select! {
            has_more = poll(app, key, &mut feeds[which], limit, wait, world) => has_more,
            // A long poll still open at the end is abandoned, as a client may abandon
            // one: nothing of it was applied, so its token was never taken either.
            () = stop.cancelled(), if wait > 0 => break,
        };
        caught_up[which] = !has_more;
        if caught_up[which] && wait == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(10) as u64)).await;
        }
    }
}

/// One page of `feed` after its token, applied to its mirror; returns `hasMore`. Checks
/// what the rule relies on of every response: only the watched workspace's records of
/// this feed, each at most once, and an upsert with its record or a removal without.
async fn poll(app: &TestApp, key: &str, feed: &mut Feed, limit: usize, wait: u64, world: &World) -> bool {
    let (seed, segment) = (world.seed, feed.segment);
    let mut query = format!("/v1/{segment}/changes?limit={limit}");
    if wait > 0 {
        write!(query, "&wait={wait}").expect("write to a string");
    }
    if let Some(token) = &feed.token {
        write!(query, "&since={}", urlencode(token)).expect("write to a string");
    }
    let reply = app.get(key, &query).await;
    assert_eq!(reply.status, 200, "seed {seed}: GET {query}: {}", reply.text);
    feed.pages += 1;
    let changes = reply.data();
    assert!(changes.len() <= limit, "seed {seed}: more than {limit} changes: {}", reply.text);
    let mut in_response = HashSet::new();
    for change in changes {
        let id = change["id"].as_str().unwrap_or_else(|| panic!("seed {seed}: a change without id: {change}"));
        assert!(
            !world.others.contains(id),
            "seed {seed}: the {segment} feed of workspace {} served {id}, a record of workspace {}: {}",
            world.watched,
            world.other,
            reply.text
        );
        assert!(world.own[segment].contains(id), "seed {seed}: the {segment} feed served {id}, none of its records");
        assert!(in_response.insert(id), "seed {seed}: {id} twice in one response: {}", reply.text);
        let applied = match (change["change"].as_str(), &change["record"]) {
            (Some("upserted"), record @ Value::Object(_)) => {
                assert_eq!(record["id"], id, "seed {seed}: a change's record is another's: {change}");
                feed.mirror.insert(id.to_owned(), record.clone());
                format!("page {}: upserted {}", feed.pages, record["name"])
            }
            (Some("removed"), Value::Null) => {
                feed.mirror.remove(id);
                format!("page {}: removed", feed.pages)
            }
            _ => panic!("seed {seed}: neither an upsert with its record nor a removal without one: {change}"),
        };
        feed.seen.entry(id.to_owned()).or_default().push(applied);
    }
    let token = reply.body["syncToken"].as_str().filter(|token| !token.is_empty());
    feed.token = Some(token.unwrap_or_else(|| panic!("seed {seed}: no syncToken: {}", reply.text)).to_owned());
    reply.body["hasMore"].as_bool().unwrap_or_else(|| panic!("seed {seed}: no hasMore: {}", reply.text))
}

/// Waits until every entity of both workspaces is at its last version and the consumer
/// holds nothing more (no duplicate still to come), so nothing is written any more.
async fn wait_until_applied(
    seed: u64,
    pool: &PgPool,
    jetstream: &jetstream::Context,
    last: &HashMap<(Uuid, Uuid), HistoryEvent>,
) {
    let expected: HashMap<(Uuid, Uuid), i64> = last.iter().map(|(key, event)| (*key, event.version)).collect();
    let workspaces: Vec<Uuid> =
        expected.keys().map(|(workspace, _)| *workspace).collect::<HashSet<_>>().into_iter().collect();
    let stored = || async {
        sqlx::query_as::<_, (Uuid, Uuid, i64)>(
            "select workspace_id, id, version from contacts where workspace_id = any($1)
             union all
             select workspace_id, id, version from items where workspace_id = any($1)",
        )
        .bind(&workspaces)
        .fetch_all(pool)
        .await
        .expect("read versions")
        .into_iter()
        .map(|(workspace, id, version)| ((workspace, id), version))
        .collect::<HashMap<_, _>>()
    };
    let drained = || async {
        let Ok(stream) = jetstream.get_stream(STREAM).await else { return false };
        stream.consumer_info(CONSUMER).await.is_ok_and(|info| info.num_pending == 0 && info.num_ack_pending == 0)
    };
    let applied = eventually(CATCH_UP, || async { stored().await == expected && drained().await }).await;
    if !applied {
        let stored = stored().await;
        let behind: Vec<String> = expected
            .iter()
            .filter(|(key, version)| stored.get(key) != Some(version))
            .map(|(key, version)| format!("{}: want v{version}, have {:?}", key.1, stored.get(key)))
            .collect();
        panic!(
            "seed {seed}: the history was not applied within {CATCH_UP:?} (consumer drained: {}): {behind:#?}",
            drained().await
        );
    }
}

/// The watched workspace's `segment` as the listing serves it, id → record, once it
/// serves exactly the active records (`expected`).
async fn listing_of(
    app: &TestApp,
    key: &str,
    segment: &str,
    expected: &HashSet<String>,
    seed: u64,
) -> HashMap<String, Value> {
    let list = || async {
        let mut listed = HashMap::new();
        for page in app.traverse(key, &format!("/v1/{segment}?limit=100")).await {
            for record in page["data"].as_array().expect("a listing's data") {
                let id = record["id"].as_str().expect("a listed record's id").to_owned();
                assert!(
                    listed.insert(id, record.clone()).is_none(),
                    "seed {seed}: the {segment} listing repeats {record}"
                );
            }
        }
        listed
    };
    let deadline = Instant::now() + LISTING_CATCH_UP;
    loop {
        let listed = list().await;
        let ids: HashSet<String> = listed.keys().cloned().collect();
        if ids == *expected {
            return listed;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: the {segment} listing does not serve the active records: listed {ids:?}, active {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What sets the client's mirror of `feed` apart from the listing, with what the client
/// saw of each such record and its history; empty when they are the same.
fn differences(feed: &Feed, listed: &HashMap<String, Value>, world: &World) -> String {
    let mut ids: Vec<&String> = feed.mirror.keys().chain(listed.keys()).collect::<HashSet<_>>().into_iter().collect();
    ids.sort();
    let mut report = String::new();
    for id in ids {
        let what = match (feed.mirror.get(id), listed.get(id)) {
            (Some(mirrored), Some(listed)) if mirrored == listed => continue,
            (Some(mirrored), Some(listed)) => format!("held as {mirrored}\n    listed as {listed}"),
            (Some(mirrored), None) => format!("held but not listed: {mirrored}"),
            (None, Some(listed)) => format!("listed but not held: {listed}"),
            (None, None) => continue,
        };
        let seen = feed.seen.get(id).map_or_else(|| "nothing".to_owned(), |seen| seen.join(", "));
        let history: Vec<String> = world
            .histories
            .get(id)
            .into_iter()
            .flatten()
            .map(|event| {
                let name = event.data.as_ref().map_or(Value::Null, |data| data["name"].clone());
                format!("v{} {} {name}", event.version, event.kind)
            })
            .collect();
        writeln!(
            report,
            "{} {id}: {what}\n    the client saw (of {} pages): {seen}\n    its history: {}",
            feed.segment,
            feed.pages,
            history.join(", ")
        )
        .expect("write to a string");
    }
    report
}

/// Whether `count` pull requests wait on the shared consumer at once.
async fn pullers_waiting(jetstream: &jetstream::Context, count: usize) -> bool {
    let Ok(stream) = jetstream.get_stream(STREAM).await else { return false };
    stream.consumer_info(CONSUMER).await.is_ok_and(|info| info.num_waiting >= count)
}
