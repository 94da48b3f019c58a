//! Random histories of contacts and items, for the convergence tests: a seeded PRNG,
//! random `data` of both kinds, and events with versions 1..=n of random kinds, which
//! a test then shuffles, duplicates and applies or publishes.

use lectern_projector::apply::Received;
use serde_json::{json, Value};
use uuid::Uuid;

/// A small deterministic PRNG (xorshift64*), so every failure names a seed that
/// reproduces it; lectern-tests does not depend on `rand`.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(seed: u64) -> Self {
        // Spread small seeds over the state; xorshift's state must never be zero.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: usize) -> usize {
        usize::try_from(self.next_u64() % u64::try_from(bound).expect("bound fits u64"))
            .expect("below bound fits usize")
    }

    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    pub fn pick<'a, T>(&mut self, choices: &'a [T]) -> &'a T {
        &choices[self.below(choices.len())]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let other = self.below(last + 1);
            items.swap(last, other);
        }
    }

    /// `Some(make(..))` half of the time.
    pub fn maybe(&mut self, make: impl FnOnce(&mut Self) -> String) -> Option<String> {
        if self.coin() {
            Some(make(self))
        } else {
            None
        }
    }

    pub fn uuid(&mut self) -> Uuid {
        Uuid::from_u64_pair(self.next_u64(), self.next_u64())
    }
}

/// Every event type, for contacts and items alike (`contact.…`, `item.…`).
pub const KINDS: [&str; 5] = ["created", "updated", "archived", "restored", "deleted"];

/// The `data` of a contact event, every optional field present half of the time.
pub fn random_contact_data(rng: &mut Rng) -> Value {
    let name = format!("{} {}", rng.pick(&["Acme", "Globex", "Initech", "Umbrella", "Hooli"]), rng.below(1_000));
    json!({
        "name": name,
        "email": rng.maybe(|rng| format!("billing{}@example.com", rng.below(100))),
        "phone": rng.maybe(|rng| format!("+49 30 {}", rng.below(1_000_000))),
        "address": rng.maybe(|rng| format!("Hauptstr. {}, Berlin", rng.below(200))),
        "tin": rng.maybe(|rng| format!("DE{:09}", rng.below(1_000_000_000))),
        "isCustomer": rng.coin(),
        "isSupplier": rng.coin(),
        "createdAt": format!("2025-0{}-1{}T08:{:02}:00.{:03}Z", 1 + rng.below(9), rng.below(10), rng.below(60), rng.below(1_000)),
    })
}

fn random_money(rng: &mut Rng) -> Value {
    if rng.coin() {
        return Value::Null;
    }
    let sign = if rng.below(4) == 0 { "-" } else { "" };
    json!({
        "amount": format!("{sign}{}.{:0width$}", rng.below(100_000), rng.below(100), width = 2),
        "currency": rng.pick(&["EUR", "USD", "CHF"]),
    })
}

/// The `data` of an item event, prices absent half of the time and sometimes negative.
pub fn random_item_data(rng: &mut Rng) -> Value {
    json!({
        "name": format!("{} {}", rng.pick(&["Screw", "Consulting hour", "Bolt", "Licence"]), rng.below(1_000)),
        "sku": rng.maybe(|rng| format!("SKU-{}", rng.below(10_000))),
        "description": rng.maybe(|rng| format!("Description {}", rng.below(10_000))),
        "type": rng.pick(&["product", "service"]),
        "unit": rng.maybe(|rng| rng.pick(&["piece", "hour", "kg"]).to_string()),
        "salePrice": random_money(rng),
        "purchasePrice": random_money(rng),
        "createdAt": format!("2025-03-0{}T1{}:00:00Z", 1 + rng.below(9), rng.below(10)),
    })
}

/// One event of a generated history, before it is given a workspace.
#[derive(Clone, Debug)]
pub struct HistoryEvent {
    /// Fixed per event, so a duplicate is the very same message again.
    pub event_id: Uuid,
    /// `contacts` or `items`: the subject's segment and the table.
    pub segment: &'static str,
    pub entity: Uuid,
    pub version: i64,
    pub kind: &'static str,
    pub data: Option<Value>,
}

impl HistoryEvent {
    /// The event's envelope in `workspace`, as upstream publishes it.
    pub fn envelope(&self, workspace: Uuid) -> Value {
        let prefix = if self.segment == "items" { "item" } else { "contact" };
        let mut event = json!({
            "eventId": self.event_id,
            "type": format!("{prefix}.{}", self.kind),
            "workspaceId": workspace,
            "entityId": self.entity,
            "version": self.version,
            "occurredAt": "2026-11-21T10:15:30.120Z",
        });
        if let Some(data) = &self.data {
            event["data"] = data.clone();
        }
        event
    }

    /// The subject the event is published on in `workspace`.
    pub fn subject(&self, workspace: Uuid) -> String {
        format!("changes.{workspace}.{}.{}", self.segment, self.entity)
    }

    /// The message this event is, published in `workspace` as stream message `sequence`.
    pub fn received(&self, workspace: Uuid, sequence: u64) -> Received {
        Received {
            subject: self.subject(workspace),
            stream_sequence: sequence,
            payload: self.envelope(workspace).to_string().into_bytes(),
        }
    }

    /// Whether the record is active once this event is its last: the listing serves it.
    pub fn leaves_active(&self) -> bool {
        !matches!(self.kind, "archived" | "deleted")
    }
}

/// Three contacts and two items, each with versions 1..=n (n ≤ 10) of random kinds, in
/// version order.
pub fn random_history(rng: &mut Rng) -> Vec<HistoryEvent> {
    random_history_of(rng, 3, 2, 10)
}

/// `contacts` contacts and then `items` items, each with versions 1..=n (n ≤
/// `max_versions`) of random kinds, in version order.
pub fn random_history_of(rng: &mut Rng, contacts: usize, items: usize, max_versions: usize) -> Vec<HistoryEvent> {
    let mut history = Vec::new();
    let segments = std::iter::repeat_n("contacts", contacts).chain(std::iter::repeat_n("items", items));
    for segment in segments {
        let entity = rng.uuid();
        for version in 1..=1 + rng.below(max_versions) {
            let kind = *rng.pick(&KINDS);
            let data = match (kind, segment) {
                ("archived" | "deleted", _) => None,
                (_, "items") => Some(random_item_data(rng)),
                _ => Some(random_contact_data(rng)),
            };
            let version = i64::try_from(version).expect("small version");
            history.push(HistoryEvent { event_id: rng.uuid(), segment, entity, version, kind, data });
        }
    }
    history.sort_by_key(|event| event.version);
    history
}
