//! The integration's webhook side: an endpoint per workspace for both resources, registered
//! as the operations guide says (`lectern-api webhooks create`), a Standard Webhooks
//! receiver on loopback, and per workspace and resource a client that pulls the feed only
//! when a delivery announces a change to it (after its first sync). Such a client reaches
//! the listing only if every change was announced by a delivery that came after it, which
//! the check asks of it ([`mirrors_follow_the_deliveries`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lectern_fixtures::prng::Prng;
use lectern_tests::process::Launch;
use lectern_tests::webhooks::{Delivery, Receiver};
use serde_json::Value;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::clients::{FeedClient, Shared};
use super::deployment::Deployment;

/// Registers an endpoint per workspace, for both resources, delivering to `receiver`.
pub async fn register(deployment: &mut Deployment, receiver: &Receiver) {
    for tenant in &deployment.tenants {
        let workspace = tenant.workspace.to_string();
        let mut create = webhooks_command(deployment, 0).args([
            "create",
            "--workspace",
            &workspace,
            "--url",
            &receiver.url,
            "--resource",
            "contacts",
            "--resource",
            "items",
            "--output",
            "json",
        ]);
        create = create.env("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1");
        let run = create.run(Duration::from_secs(60)).await;
        let created: Value = serde_json::from_str(run.stdout.trim())
            .unwrap_or_else(|error| panic!("webhooks create printed no JSON ({error}): {}{}", run.stdout, run.stderr));
        let id = created["id"].as_str().unwrap_or_else(|| panic!("webhooks create printed no id: {created}"));
        deployment.webhook_endpoints.push(id.to_owned());
    }
}

/// `lectern-api webhooks` against the deployment, with the peppers API process `index` has.
pub fn webhooks_command(deployment: &Deployment, index: usize) -> Launch {
    let mut command = Launch::api().arg("webhooks").env("DATABASE_URL", &deployment.database_url());
    for (name, value) in deployment.peppers[index].env() {
        command = command.env(name, &value);
    }
    command
}

/// Whether `delivery` announces a change to `workspace`'s `resource`.
fn announces(delivery: &Delivery, workspace: Uuid, resource: &str) -> bool {
    let body: Value = serde_json::from_str(&delivery.body).unwrap_or_default();
    body["data"]["workspaceId"].as_str() == Some(workspace.to_string().as_str())
        && body["data"]["resource"].as_str() == Some(resource)
}

/// Follows the feed of `client` as a webhook-driven integration does: a first sync, then a
/// pull to the feed's head after each delivery for its workspace and resource, and
/// nothing otherwise.
pub async fn follow_deliveries(client: Arc<Mutex<FeedClient>>, shared: Shared, receiver: Arc<Receiver>, seed: u64) {
    let mut prng = Prng::new(&[seed]);
    let (workspace, resource) = {
        let client = client.lock().await;
        (shared.tenants[client.tenant].workspace, client.resource)
    };
    let mut read = 0;
    let mut pull = true;
    loop {
        // Deliveries are read before the pull: one arriving during it brings another.
        let arrived = receiver.deliveries_from(read);
        read += arrived.len();
        pull |= arrived.iter().any(|delivery| announces(delivery, workspace, resource));
        if !pull {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        pull = false;
        loop {
            let mut held = client.lock().await;
            let syncs = held.syncs;
            let rest = held.step(&shared, &mut prng).await;
            let at_the_head = held.syncs > syncs;
            drop(held);
            if at_the_head {
                break;
            }
            tokio::time::sleep(rest).await;
        }
    }
}

/// Waits (until `deadline`) for every webhook-driven client's mirror to equal the listing
/// of its workspace and resource, but for the records in `lost`; a finding for each that
/// does not. The publisher is held, so no change is made meanwhile: a client still behind
/// was not told of a change by a delivery that came after it.
pub async fn mirrors_follow_the_deliveries(
    clients: &[Arc<Mutex<FeedClient>>],
    listings: &BTreeMap<(usize, &'static str), BTreeMap<String, Value>>,
    lost: &BTreeSet<String>,
    shared: &Shared,
    deadline: Instant,
) {
    for client in clients {
        loop {
            let held = client.lock().await;
            let listed = listings.get(&(held.tenant, held.resource)).cloned().unwrap_or_default();
            let differing = differing(&held.mirror, &listed, lost);
            if differing == 0 {
                break;
            }
            if Instant::now() > deadline {
                shared.findings.add(format!(
                    "{}: {differing} records of its mirror differ from the listing, though it pulls after every \
                     delivery: a change was not announced by a webhook delivery that came after it",
                    held.name
                ));
                break;
            }
            drop(held);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// How many records differ between `mirror` and `listed`, but for those in `lost`.
fn differing(mirror: &BTreeMap<String, Value>, listed: &BTreeMap<String, Value>, lost: &BTreeSet<String>) -> usize {
    let ids: BTreeSet<&String> = mirror.keys().chain(listed.keys()).filter(|id| !lost.contains(*id)).collect();
    ids.into_iter().filter(|id| mirror.get(*id) != listed.get(*id)).count()
}
