//! A real streaming standby of a private primary ([`TestPostgres::start_standby`]),
//! and its apply delay changed while it runs.

use std::time::{Duration, Instant};

use lectern_tests::postgres::TestPostgres;
use sqlx::{Connection, PgConnection};

/// How long the row under delay must stay invisible on the standby.
const HELD_BACK_FOR: Duration = Duration::from_secs(2);
/// How long the standby may take to show what it is no longer holding back.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(10);

/// The rule: a standby with `recovery_min_apply_delay` holds back a commit it has
/// already received from the primary until the delay has passed, and lifting the
/// delay at runtime (a reload, no restart) releases the held commit at once.
#[tokio::test]
async fn a_delayed_standby_holds_back_received_commits_until_the_delay_is_lifted() {
    let primary = TestPostgres::start_primary().await;
    let standby = primary.start_standby(None).await;
    let mut on_primary = PgConnection::connect(&primary.url_for("postgres")).await.expect("connect to the primary");
    sqlx::query("create table replicated (id integer primary key)").execute(&mut on_primary).await.expect("create");
    insert(&mut on_primary, 1).await;
    let first = primary.current_lsn().await;
    wait_until_replayed(&standby, &first).await;
    assert!(has_row(&standby, 1).await, "the standby replayed past the first row's commit ({first}) but has no row 1");

    standby.set_apply_delay(Some(Duration::from_secs(30))).await;
    insert(&mut on_primary, 2).await;
    let committed = Instant::now();
    let second = primary.current_lsn().await;
    wait_until_received(&standby, &second).await;
    tokio::time::sleep(HELD_BACK_FOR.saturating_sub(committed.elapsed())).await;

    assert!(has_row(&primary, 2).await, "the primary lost row 2");
    assert!(
        !has_row(&standby, 2).await,
        "the standby shows row 2 {HELD_BACK_FOR:?} after its commit, despite a 30 s delay"
    );
    let replayed = standby.replay_lsn().await;
    assert!(
        lsn_position(&replayed) < lsn_position(&second),
        "the standby replayed to {replayed}, past row 2's commit ({second}), while delayed"
    );

    let lifted = Instant::now();
    standby.set_apply_delay(None).await;
    while !has_row(&standby, 2).await {
        assert!(
            lifted.elapsed() < CATCH_UP_WITHIN,
            "row 2 is not on the standby {CATCH_UP_WITHIN:?} after lifting the delay"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = on_primary.close().await;
}

/// The rule: a standby copied from a primary that was itself once a standby (promoted by a
/// failover) streams from that primary, not from the server it followed before. The copy
/// of its settings still names the old server; a standby that took that line followed a
/// server long gone and never saw another commit, and every fault test and nemesis
/// schedule that promoted it went back to the moment it was made.
#[tokio::test]
async fn a_standby_of_a_promoted_standby_streams_from_it() {
    let first = TestPostgres::start_primary().await;
    let promoted = first.start_standby(None).await;
    promoted.promote().await;
    let standby = promoted.start_standby(None).await;
    let mut on_promoted =
        PgConnection::connect(&promoted.url_for("postgres")).await.expect("connect to the promoted standby");
    sqlx::query("create table replicated (id integer primary key)").execute(&mut on_promoted).await.expect("create");
    insert(&mut on_promoted, 1).await;
    let written = promoted.current_lsn().await;
    wait_until_replayed(&standby, &written).await;
    assert!(has_row(&standby, 1).await, "the standby of the promoted standby did not receive its write");
    let _ = on_promoted.close().await;
}

async fn insert(connection: &mut PgConnection, id: i32) {
    sqlx::query("insert into replicated (id) values ($1)")
        .bind(id)
        .execute(connection)
        .await
        .unwrap_or_else(|error| panic!("insert row {id} on the primary: {error}"));
}

/// Whether `server` shows row `id` (a fresh connection: what a new reader would see).
async fn has_row(server: &TestPostgres, id: i32) -> bool {
    let mut connection = PgConnection::connect(&server.url_for("postgres")).await.expect("connect");
    let found = sqlx::query_scalar("select exists (select 1 from replicated where id = $1)")
        .bind(id)
        .fetch_one(&mut connection)
        .await
        .unwrap_or_else(|error| panic!("look for row {id} on port {}: {error}", server.port));
    let _ = connection.close().await;
    found
}

/// Waits until the standby has received and stored the primary's WAL up to `lsn`.
async fn wait_until_received(standby: &TestPostgres, lsn: &str) {
    let start = Instant::now();
    while lsn_position(&standby.receive_lsn().await) < lsn_position(lsn) {
        assert!(start.elapsed() < CATCH_UP_WITHIN, "the standby has not received the WAL up to {lsn}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the standby has applied the primary's WAL up to `lsn`.
async fn wait_until_replayed(standby: &TestPostgres, lsn: &str) {
    let start = Instant::now();
    while lsn_position(&standby.replay_lsn().await) < lsn_position(lsn) {
        assert!(start.elapsed() < CATCH_UP_WITHIN, "the standby has not replayed the WAL up to {lsn}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A WAL position (`hi/lo`, both hexadecimal), as a number that orders like the WAL.
fn lsn_position(lsn: &str) -> u64 {
    let (high, low) = lsn.split_once('/').unwrap_or_else(|| panic!("{lsn:?} is no LSN"));
    let half = |hex: &str| u64::from_str_radix(hex, 16).unwrap_or_else(|error| panic!("{lsn:?} is no LSN: {error}"));
    (half(high) << 32) | half(low)
}
