//! How each fault of the catalogue is struck against the deployment: real processes killed,
//! real servers crashed, promoted, restored and pointed at, as `docs/operations.md` has an
//! operator do it and nothing more.

use std::sync::atomic::Ordering;
use std::time::Duration;

use lectern_fixtures::prng::Prng;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::process::Launch;
use lectern_tests::projector::projector_command;
use sqlx::{Connection, PgConnection};

use super::deployment::{new_secret, Deployment, Nats, API_PROCESSES};
use super::faults::{Fault, FaultKind};
use super::{Findings, Strikes};

/// Strikes `kind`. Faults that may fork the database's history are counted in `strikes`
/// as they begin and as they end, so a client whose sync overlaps one may be told to start
/// over.
pub async fn strike(
    deployment: &mut Deployment,
    kind: FaultKind,
    prng: &mut Prng,
    strikes: &Strikes,
    findings: &Findings,
) {
    let forks = Fault::of(kind).is_some_and(|fault| fault.may_start_over);
    strikes.begin(forks);
    if matches!(
        kind,
        FaultKind::FailoverToLaggingStandby
            | FaultKind::SecondFailoverToSibling
            | FaultKind::OldPrimaryBehindSameAddress
            | FaultKind::StreamAgesEventsOut
    ) {
        deployment.standbys_of_the_primary().await;
    }
    match kind {
        FaultKind::PostgresCrash => {
            deployment.primary.stop().await;
            tokio::time::sleep(pause(prng, 500, 3_000)).await;
            deployment.primary.start().await;
        }
        FaultKind::FailoverToLaggingStandby => {
            let lagging = lagging_standby(deployment, prng).await;
            deployment.fail_over_to(lagging).await;
        }
        FaultKind::SecondFailoverToSibling => {
            // Both standbys are stopped before the primary is lost, so neither sees the
            // other's promotion: they are siblings.
            let sibling = lagging_standby(deployment, prng).await;
            let first = lagging_standby(deployment, prng).await;
            deployment.fail_over_to(first).await;
            tokio::time::sleep(pause(prng, 1_000, 4_000)).await;
            deployment.fail_over_to(sibling).await;
        }
        FaultKind::OldPrimaryBehindSameAddress => {
            let lagging = lagging_standby(deployment, prng).await;
            let mut old = deployment.fail_over_to(lagging).await;
            tokio::time::sleep(pause(prng, 1_000, 4_000)).await;
            old.start().await;
            let mut standby = deployment.serve_from(old);
            standby.stop().await;
        }
        FaultKind::DumpRestoredTwice => {
            let dump = deployment.primary.dump().await;
            let first = restored_from(&dump).await;
            // Lost, but kept until the step ends: the dump is in its directory.
            let mut original = deployment.serve_from(first);
            original.stop().await;
            tokio::time::sleep(pause(prng, 1_000, 4_000)).await;
            let second = restored_from(&dump).await;
            let mut first = deployment.serve_from(second);
            first.stop().await;
            drop(original);
        }
        FaultKind::StreamAgesEventsOut => {
            // A standby falls behind, the stream lets go of every event it holds (as a
            // retention limit shorter than the standby's lag does), then the primary is lost
            // and the standby promoted: what it missed can no longer be applied again.
            let lagging = lagging_standby(deployment, prng).await;
            tokio::time::sleep(pause(prng, 1_000, 3_000)).await;
            strikes.aged_out.store(true, Ordering::SeqCst);
            if let Err(problem) = empty_the_stream(&deployment.nats.url()).await {
                findings.add(format!("the stream could not be emptied: {problem}"));
            }
            deployment.fail_over_to(lagging).await;
        }
        FaultKind::PointInTimeRestore => {
            // A base backup, a point in time a moment later, writes after that point which
            // the restore loses, then the primary lost and the backup recovered to the point
            // with the WAL the primary wrote, as from its archive.
            let mut backup = deployment.primary.base_backup().await;
            tokio::time::sleep(pause(prng, 500, 3_000)).await;
            let point = deployment.primary.current_lsn().await;
            tokio::time::sleep(pause(prng, 500, 3_000)).await;
            deployment.primary.stop().await;
            backup.start_recovering_from_wal_of(&deployment.primary, &point).await;
            drop(deployment.serve_from(backup));
        }
        FaultKind::TransactionHeldOpen => {
            let held = pause(prng, 2_000, 8_000);
            let urls = [deployment.primary.url(), deployment.primary.url_for("postgres")];
            for url in urls {
                tokio::spawn(hold_a_transaction_open(url, held));
            }
        }
        FaultKind::NatsRestart => {
            if let Nats::Single(nats) = &mut deployment.nats {
                nats.stop();
                tokio::time::sleep(pause(prng, 500, 3_000)).await;
                nats.restart().await;
            }
        }
        FaultKind::NatsNodeLoss => {
            if let Nats::Cluster(cluster) = &mut deployment.nats {
                let index = prng.below(cluster.nodes.len());
                cluster.nodes[index].stop();
                tokio::time::sleep(pause(prng, 1_000, 6_000)).await;
                cluster.nodes[index].restart().await;
            }
        }
        FaultKind::ReplicaLagging => {
            if let Some(replica) = &deployment.replica {
                let url = replica.server.url_for("postgres");
                let _ = lag_behind(&url, pause(prng, 3_000, 15_000)).await;
            }
        }
        FaultKind::ProjectorKill => {
            let index = prng.below(deployment.projectors.len());
            if let Some(projector) = deployment.projectors[index].take() {
                projector.kill().await;
            }
            deployment.start_projector(index).await;
        }
        FaultKind::ApiKill => {
            let index = prng.below(API_PROCESSES);
            if let Some(api) = deployment.take_api(index) {
                api.kill().await;
            }
            deployment.start_api(index).await;
        }
        FaultKind::ApiRestart => deployment.restart_api(prng.below(API_PROCESSES)).await,
        FaultKind::SecretRotation => rotate_the_cursor_secret(deployment, prng).await,
        FaultKind::PepperRotation => rotate_the_key_pepper(deployment, prng, findings).await,
        FaultKind::RebuildKilled => {
            let rebuild = projector_command(&deployment.nats.url(), &deployment.database_url())
                .arg("rebuild")
                .json_logs()
                .spawn();
            tokio::time::sleep(pause(prng, 50, 800)).await;
            // On a small read model the rebuild may have finished: then it was not killed
            // mid-way, and nothing else is asked of it.
            rebuild.signal("KILL");
            let _ = rebuild.ended_within(Duration::from_secs(30)).await;
        }
        FaultKind::ListenerCut => {
            let url = deployment.primary.url_for("postgres");
            let _ = cut_listeners(&url).await;
        }
    }
    strikes.end(forks);
}

/// Secrets retired after this many rotations: every client here syncs within seconds, so a
/// token older than that is never held.
const PREVIOUS_SECRETS_KEPT: usize = 3;

/// The cursor secret rotated as `docs/operations.md` says: the new secret accepted by
/// every API process first, then signing, each step a rolling restart (SIGTERM, a new
/// process) with a pause between processes in which clients reach both.
async fn rotate_the_cursor_secret(deployment: &mut Deployment, prng: &mut Prng) {
    let new = new_secret();
    deployment.cursor_secrets_ever.add(&new);
    for index in 0..API_PROCESSES {
        deployment.cursor_secrets[index].previous.insert(0, new.clone());
        deployment.restart_api(index).await;
        tokio::time::sleep(pause(prng, 500, 2_000)).await;
    }
    for index in 0..API_PROCESSES {
        let secrets = &mut deployment.cursor_secrets[index];
        let old = std::mem::replace(&mut secrets.signing, new.clone());
        secrets.previous.retain(|secret| *secret != new);
        secrets.previous.insert(0, old);
        secrets.previous.truncate(PREVIOUS_SECRETS_KEPT);
        deployment.restart_api(index).await;
        tokio::time::sleep(pause(prng, 500, 2_000)).await;
    }
}

/// How long the keys may take to be hashed again under the new pepper: each is used by
/// the clients every few seconds, and re-hashes are written every 5 s.
const REHASHED_WITHIN: Duration = Duration::from_secs(60);

/// The key pepper rotated as `docs/operations.md` says: the new pepper accepted by every
/// API process, then hashed under, each step a rolling restart; then, once `keys list` and
/// `webhooks list` (`--pepper previous --pepper unrecorded --pepper unknown`) list nothing,
/// the old pepper removed with a last rolling restart. A key refused meanwhile is a 401 the
/// clients report; an endpoint left unable to sign leaves its webhook clients behind.
async fn rotate_the_key_pepper(deployment: &mut Deployment, prng: &mut Prng, findings: &Findings) {
    let new = new_secret();
    for index in 0..API_PROCESSES {
        deployment.peppers[index].previous.insert(0, new.clone());
        deployment.restart_api(index).await;
        tokio::time::sleep(pause(prng, 500, 2_000)).await;
    }
    for index in 0..API_PROCESSES {
        let peppers = &mut deployment.peppers[index];
        let old = std::mem::replace(&mut peppers.current, new.clone());
        peppers.previous.retain(|pepper| *pepper != new);
        peppers.previous.insert(0, old);
        deployment.restart_api(index).await;
        tokio::time::sleep(pause(prng, 500, 2_000)).await;
    }
    // Keys are hashed again as they are used, endpoints' signing secrets sealed again by
    // the process delivering for them: both lists must empty before the old pepper goes.
    let deadline = tokio::time::Instant::now() + REHASHED_WITHIN;
    for listing in ["keys", "webhooks"] {
        while still_under_a_previous_pepper(deployment, listing).await {
            if tokio::time::Instant::now() > deadline {
                // Every key is used, and every endpoint looked at, every few seconds: one
                // still listed by now is a promise of the procedure broken. The old pepper
                // is kept, as the guide says.
                findings.add(format!(
                    "{listing} still listed by `{listing} list --pepper previous --pepper unrecorded --pepper unknown` \
                     {REHASHED_WITHIN:?} after the new pepper was swapped in, though each is used every few seconds"
                ));
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    for index in 0..API_PROCESSES {
        deployment.peppers[index].previous.clear();
        deployment.restart_api(index).await;
        tokio::time::sleep(pause(prng, 500, 2_000)).await;
    }
}

/// Whether `<listing> list --pepper previous --pepper unrecorded --pepper unknown` lists a
/// key or an endpoint (`listing` is `keys` or `webhooks`), or cannot tell.
async fn still_under_a_previous_pepper(deployment: &Deployment, listing: &str) -> bool {
    let mut list = Launch::api()
        .args([
            listing,
            "list",
            "--pepper",
            "previous",
            "--pepper",
            "unrecorded",
            "--pepper",
            "unknown",
            "--output",
            "json",
        ])
        .env("DATABASE_URL", &deployment.database_url());
    for (name, value) in deployment.peppers[0].env() {
        list = list.env(name, &value);
    }
    let Some(run) = list.try_run(Duration::from_secs(30)).await else { return true };
    let listed: Option<serde_json::Value> = serde_json::from_str(run.stdout.trim()).ok();
    run.code != Some(0) || listed.as_ref().and_then(serde_json::Value::as_array).is_none_or(|listed| !listed.is_empty())
}

/// A standby stopped a moment before the primary is lost, so it misses the last writes;
/// [`Deployment::fail_over_to`] starts it again once the primary is gone.
async fn lagging_standby(deployment: &mut Deployment, prng: &mut Prng) -> TestPostgres {
    let mut standby = deployment.standbys.pop().expect("the deployment keeps two standbys");
    standby.stop().await;
    tokio::time::sleep(pause(prng, 200, 2_000)).await;
    standby
}

/// Purges the stream of every event it holds, as a retention limit ages them out.
async fn empty_the_stream(nats_url: &str) -> Result<(), String> {
    let client = lectern_projector::stream::connect_once(nats_url).await.map_err(|error| error.to_string())?;
    let jetstream = async_nats::jetstream::new(client);
    let stream = jetstream.get_stream(lectern_projector::stream::STREAM).await.map_err(|error| error.to_string())?;
    stream.purge().await.map_err(|error| error.to_string())?;
    Ok(())
}

/// A fresh server, able to stream to standbys, with `dump` restored into it.
async fn restored_from(dump: &std::path::Path) -> TestPostgres {
    let server = TestPostgres::start_primary().await;
    server.restore(dump).await;
    server
}

/// A transaction holding a snapshot (and a transaction id) open for `held` on `url`'s
/// database, then rolled back: what an operator's forgotten `psql` session does.
async fn hold_a_transaction_open(url: String, held: Duration) {
    let Ok(mut connection) = PgConnection::connect(&url).await else { return };
    let Ok(mut transaction) = connection.begin().await else { return };
    let _ = sqlx::query("select txid_current()").execute(&mut *transaction).await;
    tokio::time::sleep(held).await;
    let _ = transaction.rollback().await;
}

/// Holds the replica's replay paused for `behind` (`pg_wal_replay_pause`), so it falls
/// that far behind the primary, as a replica does under a long query or a slow disk; then
/// lets it catch up.
async fn lag_behind(url: &str, behind: Duration) -> Result<(), sqlx::Error> {
    let mut connection = PgConnection::connect(url).await?;
    sqlx::query("select pg_wal_replay_pause()").execute(&mut connection).await?;
    tokio::time::sleep(behind).await;
    sqlx::query("select pg_wal_replay_resume()").execute(&mut connection).await?;
    Ok(())
}

/// Cuts the API processes' change-listener connections (`pg_terminate_backend` on every
/// session that listens), as a network blip or an idle-session reaper does.
async fn cut_listeners(url: &str) -> Result<(), sqlx::Error> {
    let mut connection = PgConnection::connect(url).await?;
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity \
         where pid <> pg_backend_pid() and query ilike 'listen %'",
    )
    .execute(&mut connection)
    .await?;
    Ok(())
}

/// A random pause between `low` and `high` milliseconds.
fn pause(prng: &mut Prng, low: i64, high: i64) -> Duration {
    Duration::from_millis(prng.between(low, high).unsigned_abs())
}
