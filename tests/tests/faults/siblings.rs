//! Sibling histories: two copies of the database forked from the same point, each written
//! on its own, and a client holding a token from one that comes to the other. A real
//! primary and `pg_basebackup` standbys (a failover is `pg_ctl -m immediate stop` of the
//! primary and `pg_ctl promote` of a standby), and dumps restored with `pg_restore` into
//! fresh servers. The only steps taken are those `docs/operations.md` names: the projector
//! and the API are pointed at the server that serves now.
//!
//! The promise: a token from any history either continues without skipping anything (its
//! own, or one the database descends from) or is answered `startOver`, never a 200 that
//! skips. Before histories had ids of their own, siblings took the same position offset,
//! and once the second sibling's transaction ids passed a token of the first, the token was
//! served empty pages: the changes the second made below it were never sent.

use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::RunningProjector;
use lectern_tests::TestApp;
use sqlx::PgPool;
use uuid::Uuid;

use crate::mirror::{
    all_acknowledged, expect_versions, listing, pool, publish_versions, reach, replayed, Expected, Mirror, Stack,
};

/// The database's bound now: past every position a client of it can hold.
async fn bound(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select bound from read_model_feed_bound()").fetch_one(pool).await.expect("sample the bound")
}

/// Writes transactions on `pool`'s server until the position it writes at is past
/// `position`: a sibling's transaction ids catching up with the other's, as they do in a
/// day of writes.
async fn write_past(pool: &PgPool, position: i64) {
    for _ in 0..100_000 {
        let written: i64 = sqlx::query_scalar("select read_model_position()").fetch_one(pool).await.expect("a write");
        if written > position {
            return;
        }
    }
    panic!("the server's positions never passed {position}");
}

/// The projector and the API on the server at `url`, as an operator points them there.
async fn serve_from(nats_url: &str, url: &str) -> (PgPool, RunningProjector, TestApp) {
    let on = pool(url).await;
    let projector = RunningProjector::start_consuming(nats_url, on.clone()).await;
    let app = TestApp::spawn(on.clone()).await;
    (on, projector, app)
}

/// A client that syncs from the beginning on `app`, then looks again after a day of writes
/// on `on`: its token is far into this history. Returns it and the database's bound then.
async fn a_client_far_into(on: &PgPool, app: &TestApp, key: &str) -> (Mirror, i64) {
    let mut client = Mirror::default();
    assert!(client.converges_to_the_listing(app, key).await, "the feed before the history is left");
    write_past(on, bound(on).await + 300).await;
    client.follow(app, key).await;
    (client, bound(on).await)
}

/// The other history's own changes: version 2 of `changed`, applied (with what the ledger
/// applies again) until the rows are as `expected` says; then its positions pass `past`.
async fn changes_of_its_own_passing(
    client: &async_nats::Client,
    on: &PgPool,
    workspace: Uuid,
    changed: &[Uuid],
    expected: &Expected,
    past: i64,
) {
    publish_versions(client, workspace, changed, 2).await;
    all_acknowledged(client).await;
    reach(on, workspace, expected).await.unwrap_or_else(|behind| panic!("{behind}"));
    write_past(on, past + 10).await;
}

/// The rule, checked by a client that followed `sibling` and comes to `app`: its token is
/// answered `startOver`, even once the database's positions have passed it, and starting
/// over converges to the listing.
async fn a_sibling_token_starts_over(app: &TestApp, key: &str, mut follower: Mirror, what: &str) {
    let token = follower.token.clone().expect("the follower holds a token");
    let reply = app.get(key, &format!("/v1/contacts/changes?since={}", lectern_tests::app::urlencode(&token))).await;
    assert_eq!(
        reply.status, 400,
        "a token from {what} was served (it skips what this history wrote below it): {}",
        reply.text
    );
    assert_eq!(reply.body["error"]["details"]["startOver"], true, "{}", reply.text);
    follower = Mirror::default();
    assert!(
        follower.converges_to_the_listing(app, key).await,
        "starting over did not converge: {} mirrored, {} listed",
        follower.records.len(),
        listing(app, key).await.len()
    );
}

/// The rule, for a second failover to a sibling: the primary A has two standbys, B and C.
/// A is lost and B promoted; clients follow B. B is lost in turn and C promoted: C never
/// saw B's promotion, so B and C are both the second timeline of A's server. A client of B
/// is told to start over on C, even after C's positions pass its token; a client holding
/// a token from A, which C descends from, follows it and converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_a_sibling_failover_is_told_to_start_over_and_one_from_their_parent_continues() {
    let mut primary = TestPostgres::start_primary().await;
    let Stack { nats, client, projector, app, workspace, key, .. } = Stack::on(&primary).await;
    let contacts: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    all_acknowledged(&client).await;
    let mut from_a = Mirror::default();
    assert!(from_a.converges_to_the_listing(&app, &key).await, "the feed on A");
    let mut standby_b = primary.start_standby(None).await;
    let mut standby_c = primary.start_standby(None).await;
    replayed(&primary, &standby_b).await;
    replayed(&primary, &standby_c).await;
    standby_c.stop().await;

    // A is lost; B takes over, and a client follows it.
    projector.stop().await;
    primary.stop().await;
    standby_b.promote().await;
    let (on_b, projector_b, app_b) = serve_from(&nats.url, &standby_b.url()).await;
    publish_versions(&client, workspace, &contacts[..10], 2).await;
    all_acknowledged(&client).await;
    let (from_b, b_reached) = a_client_far_into(&on_b, &app_b, &key).await;

    // B is lost; C, which never saw B, takes over, makes changes of its own, and its
    // positions pass the token B handed out.
    projector_b.stop().await;
    standby_b.stop().await;
    standby_c.start().await;
    standby_c.promote().await;
    let (on_c, projector_c, app_c) = serve_from(&nats.url, &standby_c.url()).await;
    let mut expected = Expected::new();
    expect_versions(&mut expected, &contacts[..10], 2);
    expect_versions(&mut expected, &contacts[10..20], 1);
    expect_versions(&mut expected, &contacts[20..], 2);
    changes_of_its_own_passing(&client, &on_c, workspace, &contacts[20..], &expected, b_reached).await;

    assert!(
        from_a.converges_to_the_listing(&app_c, &key).await,
        "the client of A, which C descends from, did not converge: {} mirrored, {} listed",
        from_a.records.len(),
        listing(&app_c, &key).await.len()
    );
    a_sibling_token_starts_over(&app_c, &key, from_b, "the sibling B").await;
    projector_c.stop().await;
}

/// The rule, for a standby copied from a just-promoted primary before anything was written
/// there: B is promoted, D is a `pg_basebackup` of B taken at once, B is written to and
/// followed, then lost, and D promoted. D never saw B's writes, nor B's registration of its
/// history: a client of B is told to start over on D.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_primary_a_standby_was_copied_from_before_it_wrote_is_told_to_start_over() {
    let mut primary = TestPostgres::start_primary().await;
    let Stack { nats, client, projector, workspace, key, .. } = Stack::on(&primary).await;
    let contacts: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    all_acknowledged(&client).await;
    let mut standby_b = primary.start_standby(None).await;
    replayed(&primary, &standby_b).await;
    projector.stop().await;
    primary.stop().await;
    standby_b.promote().await;
    // Copied from B before anything is written on B.
    let mut standby_d = standby_b.start_standby(None).await;
    standby_d.stop().await;

    let (on_b, projector_b, app_b) = serve_from(&nats.url, &standby_b.url()).await;
    publish_versions(&client, workspace, &contacts[..10], 2).await;
    all_acknowledged(&client).await;
    let (from_b, b_reached) = a_client_far_into(&on_b, &app_b, &key).await;

    projector_b.stop().await;
    standby_b.stop().await;
    standby_d.start().await;
    standby_d.promote().await;
    let (on_d, projector_d, app_d) = serve_from(&nats.url, &standby_d.url()).await;
    let mut expected = Expected::new();
    expect_versions(&mut expected, &contacts, 2);
    changes_of_its_own_passing(&client, &on_d, workspace, &contacts[10..], &expected, b_reached).await;

    a_sibling_token_starts_over(&app_d, &key, from_b, "the primary D was copied from").await;
    projector_d.stop().await;
}

/// The rule, for one dump restored twice: the database is dumped, lost, and the dump
/// restored into a fresh server X, which clients follow; X is lost in turn and the same
/// dump restored into another fresh server Y. X and Y both copy the same history: a client
/// of X is told to start over on Y, and a client holding a token from before the dump
/// follows it on Y and converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_an_earlier_restore_of_the_same_dump_is_told_to_start_over() {
    let mut original = TestPostgres::start_new().await;
    let Stack { nats, client, projector, app, workspace, key, .. } = Stack::on(&original).await;
    let contacts: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &contacts, 1).await;
    all_acknowledged(&client).await;
    let mut before_the_dump = Mirror::default();
    assert!(before_the_dump.converges_to_the_listing(&app, &key).await, "the feed before the dump");
    let dump = original.dump().await;
    projector.stop().await;

    let mut restored_x = TestPostgres::start_new().await;
    restored_x.restore(&dump).await;
    let (on_x, projector_x, app_x) = serve_from(&nats.url, &restored_x.url()).await;
    publish_versions(&client, workspace, &contacts[..10], 2).await;
    all_acknowledged(&client).await;
    let (from_x, x_reached) = a_client_far_into(&on_x, &app_x, &key).await;
    projector_x.stop().await;
    restored_x.stop().await;

    let restored_y = TestPostgres::start_new().await;
    restored_y.restore(&dump).await;
    let (on_y, projector_y, app_y) = serve_from(&nats.url, &restored_y.url()).await;
    let mut expected = Expected::new();
    expect_versions(&mut expected, &contacts[..10], 2);
    expect_versions(&mut expected, &contacts[10..20], 1);
    expect_versions(&mut expected, &contacts[20..], 2);
    changes_of_its_own_passing(&client, &on_y, workspace, &contacts[20..], &expected, x_reached).await;

    assert!(
        before_the_dump.converges_to_the_listing(&app_y, &key).await,
        "the client from before the dump did not converge on Y"
    );
    a_sibling_token_starts_over(&app_y, &key, from_x, "the first restore of the same dump").await;
    projector_y.stop().await;
    original.stop().await;
}
