//! The checker of the promises, run after each schedule once the faults have ended, the
//! deployment is healed and the publishers and clients are held between two steps:
//!
//! - every record the publisher had acknowledged is at its last version in the listing,
//!   unless one of its events is among those the projector recorded as lost (the stream no
//!   longer held them when the database needed them again);
//! - every client's mirror, brought up to date from whatever token it holds, equals the
//!   listing field for field, but for such records (a client may keep the newer version);
//! - no process exited by itself;
//! - `lectern-projector verify` finds the read model agreeing with the stream.
//!
//! A record going back in a mirror and a start-over no fault explains are caught by the
//! clients as they run ([`super::clients`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use lectern_tests::app::traverse;
use lectern_tests::projector::projector_command;
use serde_json::Value;
use sqlx::Connection;

use super::clients::FeedClient;
use super::deployment::{Deployment, Tenant};
use super::publisher::Ledger;
use super::Findings;

/// How long the read model may take to reach every acknowledged event once the faults end:
/// a projector started again waits out the consumer's ack wait, and the ledger's check of
/// what the database lacks runs every few seconds.
pub const SETTLES_WITHIN: Duration = Duration::from_secs(120);

/// Every record of `resource` the listing at `base` serves to `tenant`, by id.
pub async fn listing(
    http: &reqwest::Client,
    base: &str,
    tenant: &Tenant,
    resource: &str,
) -> Result<BTreeMap<String, Value>, String> {
    let pages = traverse(http, base, &tenant.key, &format!("/v1/{resource}?limit=100")).await?;
    Ok(pages
        .iter()
        .flat_map(|page| page["data"].as_array().cloned().unwrap_or_default())
        .map(|record| (record["id"].as_str().unwrap_or_default().to_owned(), record))
        .collect())
}

/// What the listing serves against what the ledger expects, but for the records in
/// `lost`: `None` when they agree, or what differs.
fn differences(
    listed: &BTreeMap<String, Value>,
    expected: &BTreeMap<String, String>,
    lost: &BTreeSet<String>,
) -> Option<String> {
    let mut wrong = Vec::new();
    for (id, name) in expected.iter().filter(|(id, _)| !lost.contains(*id)) {
        match listed.get(id).and_then(|record| record["name"].as_str()) {
            Some(served) if served == name => {}
            served => wrong.push(format!("{id}: listed as {served:?}, last published {name:?}")),
        }
    }
    wrong.extend(
        listed
            .keys()
            .filter(|id| !expected.contains_key(*id) && !lost.contains(*id))
            .map(|id| format!("{id}: listed, not active")),
    );
    let count = wrong.len();
    (count > 0)
        .then(|| format!("{count} records differ, first: {}", wrong.into_iter().take(5).collect::<Vec<_>>().join("; ")))
}

/// The stream sequences the projector recorded as lost, as half-open ranges.
async fn lost_sequences(deployment: &Deployment) -> Result<Vec<(u64, u64)>, sqlx::Error> {
    let mut connection = sqlx::PgConnection::connect(&deployment.database_url()).await?;
    let ranges: Vec<(i64, i64)> =
        sqlx::query_as("select lower(r), upper(r) from read_model_lost, unnest(sequences) as r")
            .fetch_all(&mut connection)
            .await?;
    let _ = connection.close().await;
    Ok(ranges.into_iter().map(|(from, to)| (from.unsigned_abs(), to.unsigned_abs())).collect())
}

/// Waits until every workspace's listing is what the ledger expects, but for records with
/// an event the projector recorded as lost (in this database, or `known_lost` from earlier
/// checks: a later restore may not hold the record of the loss); a finding for each that
/// is not within [`SETTLES_WITHIN`]. Returns the listings and those records.
pub async fn listings_reach_the_ledger(
    http: &reqwest::Client,
    deployment: &Deployment,
    ledger: &Ledger,
    known_lost: &BTreeSet<String>,
    findings: &Findings,
) -> (BTreeMap<(usize, &'static str), BTreeMap<String, Value>>, BTreeSet<String>) {
    let deadline = Instant::now() + SETTLES_WITHIN;
    let mut listings = BTreeMap::new();
    let mut lost = known_lost.clone();
    for (index, tenant) in deployment.tenants.iter().enumerate() {
        for resource in ["contacts", "items"] {
            let expected = ledger.expected(index, resource);
            loop {
                let base = deployment.endpoints.pick(0).unwrap_or_default();
                let listed = listing(http, &base, tenant, resource).await;
                // Read after the listing: a record the listing shows behind was lost by then.
                if let Ok(sequences) = lost_sequences(deployment).await {
                    lost.extend(ledger.records_with_events_in(&sequences));
                }
                let problem = match &listed {
                    Ok(listed) => differences(listed, &expected, &lost),
                    Err(error) => Some(error.clone()),
                };
                match problem {
                    None => {
                        listings.insert((index, resource), listed.unwrap_or_default());
                        break;
                    }
                    Some(problem) if Instant::now() > deadline => {
                        findings.add(format!(
                            "workspace {index}'s {resource} listing is not at the last published versions \
                             {SETTLES_WITHIN:?} after the faults: {problem}"
                        ));
                        listings.insert((index, resource), listed.unwrap_or_default());
                        break;
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
    }
    (listings, lost)
}

/// Brings `client` up to date from its token (until `deadline`) and compares its mirror
/// with `listed`, but for the records in `lost`.
pub async fn mirror_equals_the_listing(
    client: &mut FeedClient,
    shared: &super::clients::Shared,
    listed: &BTreeMap<String, Value>,
    lost: &BTreeSet<String>,
    deadline: Instant,
) {
    let mut prng = lectern_fixtures::prng::Prng::new(&[client.tenant as u64, client.syncs]);
    let syncs = client.syncs;
    client.checked = true;
    // Until it has finished one more sync than before: a whole pass to the feed's head.
    while client.syncs == syncs && Instant::now() < deadline {
        // The rest a refusal asks for is kept: a client refused every time (a key no longer
        // accepted) would otherwise ask as fast as it is answered until the deadline.
        let rest = client.step(shared, &mut prng).await;
        tokio::time::sleep(rest.min(Duration::from_secs(1))).await;
    }
    client.checked = false;
    let kept = |id: &&String| !lost.contains(*id);
    let mirror: BTreeMap<&String, &Value> = client.mirror.iter().filter(|(id, _)| kept(id)).collect();
    let listed: BTreeMap<&String, &Value> = listed.iter().filter(|(id, _)| kept(id)).collect();
    if mirror == listed {
        return;
    }
    let missing = listed.keys().filter(|id| !mirror.contains_key(*id)).count();
    let extra = mirror.keys().filter(|id| !listed.contains_key(*id)).count();
    let stale: Vec<String> = mirror
        .iter()
        .filter(|(id, record)| listed.get(*id).is_some_and(|listed| listed != *record))
        .map(|(id, record)| format!("{id}: mirrored {}, listed {}", record["name"], listed[id]["name"]))
        .take(5)
        .collect();
    shared.findings.add(format!(
        "{}: its mirror is not the listing: {missing} missing, {extra} not listed, stale: {stale:?}",
        client.name
    ));
}

/// `lectern-projector verify`: exit 0 when the read model agrees with the stream; once
/// events were `aged_out` of the stream, exit 2 (it cannot tell without the stream's whole
/// history, and says so) is the documented answer.
pub async fn verify_agrees(deployment: &Deployment, aged_out: bool, findings: &Findings) {
    let run = projector_command(&deployment.nats.url(), &deployment.database_url())
        .arg("verify")
        .run(Duration::from_secs(120))
        .await;
    let expected = if aged_out { Some(2) } else { Some(0) };
    if run.code != expected {
        findings.add(format!(
            "lectern-projector verify did not agree with the stream (exit {:?}): {}\n{}",
            run.code,
            run.stdout.trim(),
            super::deployment::tail(&run.stderr)
        ));
    }
}
