//! A three-node JetStream cluster with `CHANGES` at three replicas (`docs/operations.md`,
//! "Scaling out"): any node may be killed (`kill -9`) while events are published and
//! projected, a follower, the consumer's leader and the stream's leader in turn, and
//! no event is lost, none is dead-lettered, and the projector never stops.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream::ClusterInfo};
use async_nats::HeaderMap;
use futures_util::future::join_all;
use lectern_projector::daemon::consumer::RunSettings;
use lectern_projector::stream::{connect_once, ensure_stream, CONSUMER, STREAM};
use lectern_tests::nats::TestCluster;
use lectern_tests::projector::{contact_event, eventually, RunningProjector};
use lectern_tests::TestDatabase;
use serde_json::Value;
use uuid::Uuid;

const REPLICAS: usize = 3;
const WORKSPACES: usize = 10;
const CONTACTS_PER_WORKSPACE: usize = 1_000;
const VERSIONS: i64 = 5;
/// Leader elections take a few seconds; a publish or an info request is retried this long.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// One event as published: its id (the same on every retry, so JetStream stores it once),
/// subject and body.
struct Publication {
    event_id: String,
    subject: String,
    body: Vec<u8>,
}

fn history() -> Vec<Publication> {
    let records: Vec<(Uuid, Uuid)> = (0..WORKSPACES)
        .flat_map(|_| {
            let workspace = Uuid::new_v4();
            (0..CONTACTS_PER_WORKSPACE).map(move |_| (workspace, Uuid::new_v4()))
        })
        .collect();
    (1..=VERSIONS)
        .flat_map(|version| {
            records.iter().map(move |(workspace, id)| {
                let kind = if version == 1 { "created" } else { "updated" };
                let event = contact_event(kind, *workspace, *id, version, &format!("{id} v{version}"));
                Publication {
                    event_id: event["eventId"].as_str().unwrap_or_default().to_owned(),
                    subject: format!("changes.{workspace}.contacts.{id}"),
                    body: Value::to_string(&event).into_bytes(),
                }
            })
        })
        .collect()
}

/// Publishes `events` in windows, each event retried until the cluster acknowledges it.
async fn publish_all(jetstream: &jetstream::Context, events: &[Publication]) {
    for window in events.chunks(500) {
        let mut pending: Vec<&Publication> = window.iter().collect();
        let deadline = Instant::now() + RETRY_FOR;
        while !pending.is_empty() {
            assert!(Instant::now() < deadline, "{} events not acknowledged in {RETRY_FOR:?}", pending.len());
            let mut acks = Vec::with_capacity(pending.len());
            for event in &pending {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", event.event_id.as_str());
                let sent =
                    jetstream.publish_with_headers(event.subject.clone(), headers, event.body.clone().into()).await;
                acks.push(sent);
            }
            // Awaited together: a publish lost with a killed leader is never answered, and
            // each ack times out on its own 5 s, so one after another a window would wait
            // for hundreds of them in turn.
            let acknowledged = join_all(acks.into_iter().map(|sent| async move {
                match sent {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                }
            }))
            .await;
            let failed: Vec<&Publication> = pending
                .into_iter()
                .zip(acknowledged)
                .filter_map(|(event, acknowledged)| (!acknowledged).then_some(event))
                .collect();
            if !failed.is_empty() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            pending = failed;
        }
    }
}

/// The cluster's view of the stream and of the projectors' consumer, retried while
/// leaders are elected.
async fn cluster_info(jetstream: &jetstream::Context) -> (ClusterInfo, ClusterInfo) {
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let info = async {
            let mut stream = jetstream.get_stream(STREAM).await.ok()?;
            let stream_cluster = stream.info().await.ok()?.cluster.clone()?;
            let consumer_cluster = stream.consumer_info(CONSUMER).await.ok()?.cluster.clone()?;
            stream_cluster.leader.as_ref()?;
            consumer_cluster.leader.as_ref()?;
            Some((stream_cluster, consumer_cluster))
        };
        if let Some(info) = info.await {
            return info;
        }
        assert!(Instant::now() < deadline, "the cluster had no stream and consumer leaders for {RETRY_FOR:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until both leaders are elected and every replica of both is current again.
async fn every_replica_current(jetstream: &jetstream::Context) {
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let (stream, consumer) = cluster_info(jetstream).await;
        let current = |cluster: &ClusterInfo| {
            cluster.replicas.len() == REPLICAS - 1 && cluster.replicas.iter().all(|peer| peer.current && !peer.offline)
        };
        if current(&stream) && current(&consumer) {
            return;
        }
        assert!(Instant::now() < deadline, "replicas not current after {RETRY_FOR:?}: {stream:?} {consumer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_of_a_three_node_cluster_dies_and_no_event_is_lost_nor_the_projector_stopped() {
    let db = TestDatabase::create().await;
    let mut cluster = TestCluster::start().await;
    let urls = cluster.urls();
    let jetstream = jetstream::new(connect_once(&urls).await.expect("connect to the cluster"));
    let created = eventually(RETRY_FOR, || async { ensure_stream(&jetstream, REPLICAS).await.is_ok() }).await;
    assert!(created, "the cluster did not create an R{REPLICAS} stream within {RETRY_FOR:?}");
    let settings = RunSettings { stream_replicas: REPLICAS, ..RunSettings::default() };
    let projector = RunningProjector::start_with(&urls, db.pool.clone(), settings).await;

    let events = history();
    let fifth = events.len() / 5;
    publish_all(&jetstream, &events[..fifth]).await;
    every_replica_current(&jetstream).await;
    let (stream, consumer) = cluster_info(&jetstream).await;
    let leaders = [stream.leader.clone(), consumer.leader.clone()];
    let follower = (0..REPLICAS)
        .find(|index| !leaders.iter().flatten().any(|leader| cluster.index_of(leader) == Some(*index)))
        .unwrap_or(0);
    let consumer_leader = consumer.leader.as_deref().and_then(|name| cluster.index_of(name)).expect("consumer leader");

    // A follower, then the consumer's leader, then the stream's leader: each killed while
    // the next fifth of the events is published and the projector applies the backlog,
    // then started again and caught up before the next.
    for (round, victim) in [Some(follower), Some(consumer_leader), None].into_iter().enumerate() {
        let victim = match victim {
            Some(victim) => victim,
            None => {
                let (stream, _) = cluster_info(&jetstream).await;
                stream.leader.as_deref().and_then(|name| cluster.index_of(name)).expect("stream leader")
            }
        };
        cluster.nodes[victim].stop();
        publish_all(&jetstream, &events[fifth * (round + 1)..fifth * (round + 2)]).await;
        cluster.nodes[victim].restart().await;
        every_replica_current(&jetstream).await;
        assert!(projector.is_running(), "the projector stopped when node {victim} was killed");
    }
    publish_all(&jetstream, &events[fifth * 4..]).await;

    let records = (WORKSPACES * CONTACTS_PER_WORKSPACE) as i64;
    let at_last_version = || async {
        let (count,): (i64,) =
            sqlx::query_as("select count(*) from contacts where version = $1 and name like '% v' || $1")
                .bind(VERSIONS)
                .fetch_one(&db.pool)
                .await
                .expect("count contacts at their last version");
        count == records
    };
    assert!(
        eventually(Duration::from_secs(180), at_last_version).await,
        "not every contact reached version {VERSIONS} within 180 s"
    );
    let dead: i64 =
        sqlx::query_scalar("select count(*) from dead_letters").fetch_one(&db.pool).await.expect("count dead letters");
    assert_eq!(dead, 0, "valid events were dead-lettered");
    assert!(projector.is_running(), "the projector stopped");
    projector.stop().await;
}
