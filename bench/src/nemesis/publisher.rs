//! The upstream's side of a nemesis run: steady publishing of creates, updates, archives,
//! restores and deletes of contacts and items in several workspaces, with redelivered and
//! out-of-order events among them, each one published until JetStream acknowledges it (as
//! an upstream with an outbox does), and a ledger of what each record's last version is.
//!
//! Every name carries its version (`Acme 12 v3`), so a record served anywhere says which
//! version it is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use lectern_fixtures::prng::Prng;
use lectern_tests::history::{random_contact_data, random_item_data, Rng};
use lectern_tests::projector::subject_of;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use uuid::Uuid;

use super::deployment::Tenant;

/// Between two steps of the publisher: about 20 events a second.
const PACE: Duration = Duration::from_millis(50);
/// How long one publish may wait for its acknowledgement before it is sent again.
const ACK_WITHIN: Duration = Duration::from_secs(5);

/// One record as the publisher last made it.
#[derive(Clone, Debug)]
pub struct Record {
    pub tenant: usize,
    /// `contacts` or `items`.
    pub resource: &'static str,
    pub id: Uuid,
    /// The highest version published.
    pub version: i64,
    /// What that version leaves: served by the listing (with `name`) or not.
    pub active: bool,
    pub name: Option<String>,
    deleted: bool,
    /// Every event published for it, for redeliveries.
    sent: Vec<Value>,
    /// The stream sequence JetStream acknowledged each of its publishes at.
    sequences: Vec<u64>,
}

/// What the publisher has had acknowledged: the expected state of every record.
#[derive(Default)]
pub struct Ledger {
    pub records: Vec<Record>,
    pub events: u64,
    pub redelivered: u64,
    pub out_of_order: u64,
}

impl Ledger {
    /// The records of `tenant`'s `resource` the listing must serve, by id, with their names.
    pub fn expected(&self, tenant: usize, resource: &str) -> BTreeMap<String, String> {
        self.records
            .iter()
            .filter(|record| record.tenant == tenant && record.resource == resource && record.active)
            .map(|record| (record.id.to_string(), record.name.clone().unwrap_or_default()))
            .collect()
    }
}

impl Ledger {
    /// The ids of the records one of whose events JetStream acknowledged at a sequence in
    /// `lost` (half-open ranges of stream sequences).
    pub fn records_with_events_in(&self, lost: &[(u64, u64)]) -> std::collections::BTreeSet<String> {
        self.records
            .iter()
            .filter(|record| {
                record.sequences.iter().any(|sequence| lost.iter().any(|(from, to)| (from..to).contains(&sequence)))
            })
            .map(|record| record.id.to_string())
            .collect()
    }
}

/// The version a served name carries (`Acme 12 v3` → 3).
pub fn version_in(name: &str) -> Option<i64> {
    name.rsplit_once(" v").and_then(|(_, version)| version.parse().ok())
}

/// Publishes until the task is aborted; the ledger is locked for each step, so whoever
/// holds it sees no publish half made.
pub async fn publish(nats_url: String, tenants: Vec<Tenant>, ledger: Arc<Mutex<Ledger>>, seed: u64) {
    let Ok(client) = lectern_projector::stream::connect(&nats_url).await else {
        eprintln!("nemesis: the publisher cannot reach {nats_url}");
        return;
    };
    let jetstream = jetstream::new(client);
    let mut prng = Prng::new(&[seed, 0x9e37]);
    let mut data = Rng::seeded(seed);
    loop {
        {
            let mut ledger = ledger.lock().await;
            step(&jetstream, &tenants, &mut ledger, &mut prng, &mut data).await;
        }
        tokio::time::sleep(PACE).await;
    }
}

async fn step(
    jetstream: &jetstream::Context,
    tenants: &[Tenant],
    ledger: &mut Ledger,
    prng: &mut Prng,
    data: &mut Rng,
) {
    let live: Vec<usize> = (0..ledger.records.len()).filter(|index| !ledger.records[*index].deleted).collect();
    if live.is_empty() || prng.chance(30) {
        let tenant = prng.below(tenants.len());
        let resource = if prng.chance(60) { "contacts" } else { "items" };
        let mut record = Record {
            tenant,
            resource,
            id: Uuid::new_v4(),
            version: 0,
            active: false,
            name: None,
            deleted: false,
            sent: Vec::new(),
            sequences: Vec::new(),
        };
        let event = next_event(&mut record, tenants, 1, "created", data);
        record.sequences.push(send(jetstream, &event).await);
        ledger.records.push(record);
        ledger.events += 1;
        return;
    }
    let index = live[prng.below(live.len())];
    let record = &mut ledger.records[index];
    let roll = prng.below(100);
    let next = record.version + 1;
    let kinds: &[&str] = match roll {
        0..45 => &["updated"],
        45..55 if record.active => &["archived"],
        45..55 => &["restored"],
        55..60 => &["deleted"],
        60..75 => &["updated", "updated"],
        _ => &[],
    };
    if kinds.is_empty() {
        // A redelivery: an event already acknowledged, sent again as a new message.
        let again = record.sent[prng.below(record.sent.len())].clone();
        let sequence = send(jetstream, &again).await;
        record.sequences.push(sequence);
        ledger.redelivered += 1;
        ledger.events += 1;
        return;
    }
    let events: Vec<Value> = kinds
        .iter()
        .enumerate()
        .map(|(offset, kind)| next_event(record, tenants, next + offset as i64, kind, data))
        .collect();
    // Two versions at once go out newest first: the projector must keep the newer.
    if events.len() > 1 {
        ledger.out_of_order += 1;
    }
    for event in events.iter().rev() {
        let sequence = send(jetstream, event).await;
        record.sequences.push(sequence);
        ledger.events += 1;
    }
}

/// Version `version` of `record` as a `kind` event; the record takes it as its last when it
/// is the highest.
fn next_event(record: &mut Record, tenants: &[Tenant], version: i64, kind: &str, rng: &mut Rng) -> Value {
    let singular = if record.resource == "items" { "item" } else { "contact" };
    let mut event = json!({
        "eventId": Uuid::new_v4(),
        "type": format!("{singular}.{kind}"),
        "workspaceId": tenants[record.tenant].workspace,
        "entityId": record.id,
        "version": version,
        "occurredAt": "2026-11-29T10:15:30.120Z",
    });
    let leaves_active = !matches!(kind, "archived" | "deleted");
    let mut name = None;
    if leaves_active {
        let mut data = if record.resource == "items" { random_item_data(rng) } else { random_contact_data(rng) };
        let versioned = format!("{} v{version}", data["name"].as_str().unwrap_or("Record"));
        data["name"] = Value::String(versioned.clone());
        event["data"] = data;
        name = Some(versioned);
    }
    if version > record.version {
        record.version = version;
        record.active = leaves_active;
        record.name = name;
        record.deleted = kind == "deleted";
    }
    record.sent.push(event.clone());
    event
}

/// Publishes `event` until JetStream acknowledges it, and returns the sequence it was
/// acknowledged at: through a restart of the server the client reconnects, and a publish
/// whose ack was lost is sent again (a duplicate the projector must take as one).
async fn send(jetstream: &jetstream::Context, event: &Value) -> u64 {
    let subject = subject_of(event);
    let payload = event.to_string();
    loop {
        let attempt = async {
            let ack = jetstream.publish(subject.clone(), payload.clone().into()).await.ok()?;
            ack.await.ok()
        };
        if let Ok(Some(ack)) = tokio::time::timeout(ACK_WITHIN, attempt).await {
            return ack.sequence;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
