//! How a batch commits. One committed before its flush returns without waiting for the
//! flush (its messages wait for a flush barrier instead, see `durable_acks`), whether it
//! goes as a single statement or as a transaction; one committed flushed waits. Neither
//! changes the session's own `synchronous_commit`, and a batch the database refuses is
//! still taken apart event by event.

use lectern_projector::stream::StreamId;
use std::time::Duration;

use lectern_projector::apply::{apply_batch, Applied, CommitMode, Received};
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::{contact_event, contact_row, item_created, item_data};
use lectern_tests::TestDatabase;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use uuid::Uuid;

/// Far beyond any commit that does not wait for its flush.
const RETURNS_WITHIN: Duration = Duration::from_secs(30);
/// Long enough for a commit that does not wait to have returned many times over.
const STILL_WAITING_AFTER: Duration = Duration::from_secs(3);

fn received(event: &Value, sequence: u64) -> Received {
    let kind = event["type"].as_str().expect("an event type");
    let segment = if kind.starts_with("item.") { "items" } else { "contacts" };
    let (workspace, entity) = (event["workspaceId"].as_str(), event["entityId"].as_str());
    Received {
        subject: format!("changes.{}.{segment}.{}", workspace.expect("a workspace"), entity.expect("an entity")),
        stream_sequence: sequence,
        payload: event.to_string().into_bytes(),
    }
}

fn item(workspace: Uuid, id: Uuid, name: &str) -> Value {
    item_created(workspace, id, item_data(name, Value::Null, Value::Null))
}

async fn item_exists(pool: &PgPool, workspace: Uuid, id: Uuid) -> bool {
    sqlx::query_scalar("select exists (select from items where workspace_id = $1 and id = $2)")
        .bind(workspace)
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("look the item up")
}

async fn dead_letter_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from dead_letters").fetch_one(pool).await.expect("count dead letters")
}

/// A private server whose synchronous commits can never complete: it waits for a
/// synchronous standby that does not exist.
async fn server_whose_flushes_never_complete() -> (TestPostgres, PgPool) {
    let server = TestPostgres::start_new().await;
    lectern_api::reads::create_and_migrate(&server.url()).await.expect("create and migrate the private database");
    let pool = PgPoolOptions::new().max_connections(4).connect(&server.url()).await.expect("connect");
    for setting in [
        "alter system set synchronous_commit = 'on'",
        "alter system set synchronous_standby_names = 'ghost'",
        "select pg_reload_conf()",
    ] {
        sqlx::query(setting).execute(&pool).await.expect(setting);
    }
    // A reload reaches each session at its next statement; a fresh one is certain to
    // have it, so wait until it does.
    let waits_for_the_ghost = lectern_tests::projector::eventually(RETURNS_WITHIN, || async {
        let mut fresh = pool.acquire().await.expect("a connection");
        let names: String = sqlx::query_scalar("show synchronous_standby_names")
            .fetch_one(&mut *fresh)
            .await
            .expect("show synchronous_standby_names");
        names == "ghost"
    })
    .await;
    assert!(waits_for_the_ghost, "the server never took the ghost standby");
    (server, pool)
}

#[tokio::test]
async fn batches_committed_before_their_flush_return_while_a_flushed_commit_cannot() {
    let (server, pool) = server_whose_flushes_never_complete().await;
    let workspace = Uuid::new_v4();
    let (first, second, third, fourth) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let contacts_only = vec![
        received(&contact_event("created", workspace, first, 1, "First"), 1),
        received(&contact_event("created", workspace, second, 1, "Second"), 2),
    ];
    let items_only = vec![received(&item(workspace, first, "Bolt"), 3)];
    let contacts_and_items = vec![
        received(&contact_event("created", workspace, third, 1, "Third"), 4),
        received(&item(workspace, second, "Nut"), 5),
    ];
    let with_a_dead_letter = vec![
        received(&contact_event("created", workspace, fourth, 1, "Fourth"), 6),
        Received {
            subject: format!("changes.{workspace}.contacts.{}", Uuid::new_v4()),
            stream_sequence: 7,
            payload: b"{".to_vec(),
        },
    ];

    for (what, batch, expected) in [
        ("contacts only", &contacts_only, Applied { events: 2, dead_letters: 0 }),
        ("items only", &items_only, Applied { events: 1, dead_letters: 0 }),
        ("contacts and items", &contacts_and_items, Applied { events: 2, dead_letters: 0 }),
        ("with a dead letter", &with_a_dead_letter, Applied { events: 1, dead_letters: 1 }),
    ] {
        let applied =
            tokio::time::timeout(RETURNS_WITHIN, apply_batch(&pool, StreamId::UNNAMED, batch, CommitMode::BeforeFlush))
                .await;
        let applied = applied.unwrap_or_else(|_| panic!("a batch of {what} committed before its flush waited for it"));
        assert_eq!(applied.expect("apply the batch"), expected, "{what}");
    }
    for contact in [first, second, third, fourth] {
        assert!(contact_row(&pool, workspace, contact).await.is_some(), "contact {contact} is not visible");
    }
    assert!(item_exists(&pool, workspace, first).await && item_exists(&pool, workspace, second).await);
    assert_eq!(dead_letter_count(&pool).await, 1);

    // The control: on this server a flushed commit never returns. Its connection is left
    // waiting, on a pool of its own, until the server stops.
    let control = PgPoolOptions::new().max_connections(1).connect(&server.url()).await.expect("connect");
    let flushed = vec![received(&contact_event("created", workspace, Uuid::new_v4(), 1, "Flushed"), 8)];
    let waited = tokio::time::timeout(
        STILL_WAITING_AFTER,
        apply_batch(&control, StreamId::UNNAMED, &flushed, CommitMode::Flushed),
    )
    .await;
    assert!(waited.is_err(), "a flushed commit returned without its standby: the test proves nothing here");
    drop(server);
}

#[tokio::test]
async fn committing_before_the_flush_leaves_the_sessions_own_synchronous_commit_as_it_was() {
    let db = TestDatabase::create().await;
    let options: PgConnectOptions = db.url.parse().expect("the database URL");
    // One session, so every batch and the check below share it; `on` from its start,
    // whatever the server's default.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("synchronous_commit", "on")]))
        .await
        .expect("connect");
    let workspace = Uuid::new_v4();
    let contacts = vec![received(&contact_event("created", workspace, Uuid::new_v4(), 1, "Contact"), 1)];
    let items = vec![received(&item(workspace, Uuid::new_v4(), "Item"), 2)];

    for batch in [&contacts, &items] {
        apply_batch(&pool, StreamId::UNNAMED, batch, CommitMode::BeforeFlush).await.expect("apply the batch");
        let setting: String =
            sqlx::query_scalar("show synchronous_commit").fetch_one(&pool).await.expect("show synchronous_commit");
        assert_eq!(setting, "on", "a batch's asynchronous commit leaked into its session");
    }
}

#[tokio::test]
async fn a_batch_the_database_refuses_is_taken_apart_and_only_the_refused_event_is_dead_lettered() {
    let db = TestDatabase::create().await;
    for (mode, first_sequence) in [(CommitMode::BeforeFlush, 1), (CommitMode::Flushed, 10)] {
        let workspace = Uuid::new_v4();
        let (before, refused, after) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        // Valid by the schema, but PostgreSQL text cannot hold a NUL character.
        let contacts = vec![
            received(&contact_event("created", workspace, before, 1, "Before"), first_sequence),
            received(&contact_event("created", workspace, refused, 1, "Nul\u{0}byte"), first_sequence + 1),
            received(&contact_event("created", workspace, after, 1, "After"), first_sequence + 2),
        ];
        let (good_item, refused_item) = (Uuid::new_v4(), Uuid::new_v4());
        let items = vec![
            received(&item(workspace, good_item, "Bolt"), first_sequence + 3),
            received(&item(workspace, refused_item, "Nul\u{0}"), first_sequence + 4),
        ];

        let applied = apply_batch(&db.pool, StreamId::UNNAMED, &contacts, mode).await.expect("apply the contacts");
        assert_eq!(applied, Applied { events: 2, dead_letters: 1 }, "{mode:?}");
        let applied = apply_batch(&db.pool, StreamId::UNNAMED, &items, mode).await.expect("apply the items");
        assert_eq!(applied, Applied { events: 1, dead_letters: 1 }, "{mode:?}");

        assert!(contact_row(&db.pool, workspace, before).await.is_some(), "{mode:?}");
        assert!(contact_row(&db.pool, workspace, after).await.is_some(), "{mode:?}");
        assert_eq!(contact_row(&db.pool, workspace, refused).await, None, "{mode:?}");
        assert!(item_exists(&db.pool, workspace, good_item).await, "{mode:?}");
        assert!(!item_exists(&db.pool, workspace, refused_item).await, "{mode:?}");
    }
    assert_eq!(dead_letter_count(&db.pool).await, 4);
}
