//! Batches in flight together: a batch held up inside PostgreSQL does not hold up the
//! events of other workspaces that arrive after it, and what it holds is applied once
//! it is free. Events of its own workspace wait for it: the changes feed's positions
//! are taken in commit order, one transaction of a workspace at a time
//! (docs/architecture.md, "The changes feed").

use std::time::Duration;

use lectern_tests::nats::TestNats;
use lectern_tests::projector::{contact_event, contact_row, eventually, publish, RunningProjector};
use lectern_tests::TestDatabase;
use sqlx::{Executor, PgPool};
use uuid::Uuid;

const VISIBLE_WITHIN: Duration = Duration::from_secs(15);

async fn version_of(pool: &PgPool, workspace: Uuid, id: Uuid) -> Option<i64> {
    contact_row(pool, workspace, id).await.map(|(_, version, _)| version)
}

#[tokio::test]
async fn an_event_of_another_workspace_arriving_while_a_batch_waits_on_a_row_lock_is_applied_without_waiting_for_it() {
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    // The default settings: two batches in flight.
    let projector = RunningProjector::start_consuming(&nats.url, db.pool.clone()).await;
    let client = nats.client().await;
    let (workspace, other_workspace) = (Uuid::new_v4(), Uuid::new_v4());
    let (held, arriving) = (Uuid::new_v4(), Uuid::new_v4());
    publish(&client, &contact_event("created", workspace, held, 1, "Held v1")).await;
    let created = eventually(VISIBLE_WITHIN, || async { version_of(&db.pool, workspace, held).await == Some(1) }).await;
    assert!(created, "the first contact never appeared");

    // A session of our own holds the row, so the batch that updates it waits inside PostgreSQL.
    let mut holder = db.pool.begin().await.expect("begin the holding transaction");
    holder
        .execute(sqlx::query("select 1 from contacts where id = $1 for update").bind(held))
        .await
        .expect("lock the row");
    publish(&client, &contact_event("updated", workspace, held, 2, "Held v2")).await;
    let waiting = eventually(VISIBLE_WITHIN, || async { db.sessions_waiting_on_a_lock().await > 0 }).await;
    assert!(waiting, "the update never reached the row lock");

    publish(&client, &contact_event("created", other_workspace, arriving, 1, "Arriving")).await;

    let applied =
        eventually(VISIBLE_WITHIN, || async { version_of(&db.pool, other_workspace, arriving).await == Some(1) }).await;
    assert!(applied, "an event of another workspace published after the held batch waited for it");
    assert_eq!(version_of(&db.pool, workspace, held).await, Some(1), "the held batch committed under the lock");

    holder.rollback().await.expect("release the row");
    let updated = eventually(VISIBLE_WITHIN, || async { version_of(&db.pool, workspace, held).await == Some(2) }).await;
    assert!(updated, "the held batch was not applied once the row was free");
    projector.stop().await;
}
