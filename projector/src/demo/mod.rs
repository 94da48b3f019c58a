//! Demo data: a few hundred realistic contacts and items for one workspace, published
//! as change events through the same contract upstream systems use.
//!
//! A fresh Lectern serves an empty workspace, and rows written by hand bypass the
//! projector. Publishing events instead exercises the whole path (JetStream, projector,
//! read model, API) and shows upstream teams what real events look like: created
//! records, some updated, about a tenth archived, one archived and restored, one
//! contact and one item deleted.
//!
//! Everything is derived from the workspace id alone, with a small PRNG of our own
//! (`rand`'s `StdRng` is documented as free to change its algorithm between releases):
//! record ids, event ids, names and timestamps are the same on every run and every
//! build. Re-publishing is therefore harmless: JetStream stores an event once per
//! `Nats-Msg-Id` (= eventId) within its duplicate window, and the projector ignores
//! versions it already holds. [`publish_demo`] skips the work entirely once the stream
//! holds the demo's final event; [`resend_demo`] sends it again regardless, for a read
//! model that lost what the stream's consumer had already acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use lectern_schema::events::{ChangeEvent, ChangeKind, EntityKind, EventType, ItemType};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::ProjectorError;
use crate::stream::ensure_stream;

use catalogue::{City, Country, Currency, Template};

/// The workspace `lectern-api dev` issues its demo key for; the demo's default.
pub const DEMO_WORKSPACE: Uuid = Uuid::from_u128(0x6d1f0b7e_3c55_4a3b_8f9f_5d1f0e2a7c11);
/// How many contacts the demo creates.
pub const DEMO_CONTACTS: usize = 300;
/// How many items the demo creates.
pub const DEMO_ITEMS: usize = 200;

/// Publishes in flight before their acks are awaited: enough to keep the connection
/// busy, far below async-nats' limit of pending acks (5 000).
const PIPELINE: usize = 256;

/// One generated event, ready to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoEvent {
    /// `changes.<workspace>.<contacts|items>.<entity>`, the subject the event must arrive on.
    pub subject: String,
    /// The envelope's `eventId`, also the `Nats-Msg-Id` that lets JetStream drop repeats.
    pub event_id: Uuid,
    /// What the event does, for counting without decoding the JSON.
    pub event_type: EventType,
    /// The record the event is about.
    pub entity_id: Uuid,
    /// The record's version after this event.
    pub version: i64,
    /// The exact message body.
    pub json: String,
}

/// Contacts and items, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DemoCounts {
    /// Contact records.
    pub contacts: usize,
    /// Item records.
    pub items: usize,
}

/// What [`publish_demo`] did, as the `demo` command reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoOutcome {
    /// Every event was sent and acknowledged.
    Published {
        /// The workspace the demo records belong to.
        workspace: Uuid,
        /// Events sent.
        events: usize,
        /// Of those, how many JetStream already held (an earlier run was cut short).
        duplicates: usize,
        /// Records the events describe.
        records: DemoCounts,
        /// Records the read model serves once every event is projected.
        active: DemoCounts,
    },
    /// The stream already holds the demo's final event: nothing was sent.
    AlreadyPublished {
        /// The workspace the demo records belong to.
        workspace: Uuid,
        /// Events the demo consists of.
        events: usize,
    },
}

impl fmt::Display for DemoOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Published { workspace, events, duplicates, records, active } => {
                write!(
                    f,
                    "published {events} demo events ({} contacts, {} items; {} and {} active once projected) \
                     for workspace {workspace}",
                    records.contacts, records.items, active.contacts, active.items
                )?;
                if *duplicates > 0 {
                    write!(f, "; JetStream already held {duplicates} of them")?;
                }
                Ok(())
            }
            Self::AlreadyPublished { workspace, events } => {
                write!(f, "demo data for workspace {workspace} is already published ({events} events); nothing to do")
            }
        }
    }
}

/// The demo's events for `workspace`, in publishing order (by `occurredAt`); the same on
/// every call. Each passes [`ChangeEvent::decode_from`] on its subject.
pub fn demo_events(workspace: Uuid) -> Vec<DemoEvent> {
    let mut planned = plan_contacts(&mut Prng::new(workspace, CONTACT_TAG), DEMO_CONTACTS);
    planned.extend(plan_items(&mut Prng::new(workspace, ITEM_TAG), DEMO_ITEMS));
    // Stable: a record's events keep their order even if two instants were equal.
    planned.sort_by_key(|event| event.at);
    planned.into_iter().map(|event| event.render(workspace)).collect()
}

/// How many records `events` describe (one `created` each).
pub fn record_counts(events: &[DemoEvent]) -> DemoCounts {
    count(events.iter().filter(|event| event.event_type.change == ChangeKind::Created).map(|event| event.event_type))
}

/// How many contacts and items the read model serves once `events` are all projected:
/// those whose highest version was created, updated or restored.
pub fn expected_active_counts(events: &[DemoEvent]) -> DemoCounts {
    count(
        latest(events)
            .into_values()
            .map(|(_, event_type)| event_type)
            .filter(|event_type| event_type.change.carries_state()),
    )
}

/// Each record's highest version in `events`: once the read model holds at least these,
/// the demo is fully projected (deleted records keep their row, at the delete's version).
pub fn final_versions(events: &[DemoEvent]) -> BTreeMap<(EntityKind, Uuid), i64> {
    latest(events).into_iter().map(|(key, (version, _))| (key, version)).collect()
}

fn latest(events: &[DemoEvent]) -> BTreeMap<(EntityKind, Uuid), (i64, EventType)> {
    let mut latest: BTreeMap<(EntityKind, Uuid), (i64, EventType)> = BTreeMap::new();
    for event in events {
        let key = (event.event_type.entity, event.entity_id);
        if latest.get(&key).is_none_or(|(version, _)| *version < event.version) {
            latest.insert(key, (event.version, event.event_type));
        }
    }
    latest
}

fn count(types: impl Iterator<Item = EventType>) -> DemoCounts {
    types.fold(DemoCounts::default(), |mut counts, event_type| {
        match event_type.entity {
            EntityKind::Contact => counts.contacts += 1,
            EntityKind::Item => counts.items += 1,
        }
        counts
    })
}

/// Publishes the demo for `workspace` (creating the stream if missing) and waits until
/// JetStream has acknowledged every event. Does nothing when the stream already holds
/// the demo's final event; an earlier run cut short is completed, its events stored once.
#[tracing::instrument(skip_all, fields(%workspace))]
pub async fn publish_demo(jetstream: &jetstream::Context, workspace: Uuid) -> Result<DemoOutcome, ProjectorError> {
    let events = demo_events(workspace);
    let stream = ensure_stream(jetstream).await?;
    if let Some(last) = events.last() {
        if holds(&stream, last).await? {
            return Ok(DemoOutcome::AlreadyPublished { workspace, events: events.len() });
        }
    }
    let duplicates = send(jetstream, &events, Deduplicate::ByEventId).await?;
    tracing::info!(events = events.len(), duplicates, "demo published");
    Ok(DemoOutcome::Published {
        workspace,
        events: events.len(),
        duplicates,
        records: record_counts(&events),
        active: expected_active_counts(&events),
    })
}

/// Publishes the demo's events again even though the stream holds them, for a read
/// model that lost what the durable consumer had already acknowledged (a database
/// reset under a kept stream). Sent without `Nats-Msg-Id`, or JetStream would drop them
/// as repeats within its duplicate window; the projector's version guard makes the
/// second copy harmless wherever the first was applied. Returns the events sent.
#[tracing::instrument(skip_all, fields(%workspace))]
pub async fn resend_demo(jetstream: &jetstream::Context, workspace: Uuid) -> Result<usize, ProjectorError> {
    let events = demo_events(workspace);
    ensure_stream(jetstream).await?;
    send(jetstream, &events, Deduplicate::No).await?;
    tracing::info!(events = events.len(), "demo sent again");
    Ok(events.len())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Deduplicate {
    ByEventId,
    No,
}

/// Sends `events` pipelined and awaits every acknowledgement; returns how many
/// JetStream reported as duplicates.
async fn send(
    jetstream: &jetstream::Context,
    events: &[DemoEvent],
    deduplicate: Deduplicate,
) -> Result<usize, ProjectorError> {
    let total = events.len();
    let mut duplicates = 0;
    for (chunk, batch) in events.chunks(PIPELINE).enumerate() {
        let mut acks = Vec::with_capacity(batch.len());
        for (offset, event) in batch.iter().enumerate() {
            let number = chunk * PIPELINE + offset + 1;
            let failed = move |error: &dyn fmt::Display| {
                ProjectorError::Nats(format!("publishing demo event {number} of {total} to {}: {error}", event.subject))
            };
            let mut headers = async_nats::HeaderMap::new();
            if deduplicate == Deduplicate::ByEventId {
                headers.insert(async_nats::header::NATS_MESSAGE_ID, event.event_id.to_string().as_str());
            }
            let ack = jetstream
                .publish_with_headers(event.subject.clone(), headers, event.json.clone().into())
                .await
                .map_err(|error| failed(&error))?;
            acks.push((ack, failed));
        }
        for (ack, failed) in acks {
            if ack.await.map_err(|error| failed(&error))?.duplicate {
                duplicates += 1;
            }
        }
    }
    Ok(duplicates)
}

/// Whether the last message on `event`'s subject is `event` (compared decoded, so a
/// different JSON rendering of the same event still counts).
async fn holds(stream: &jetstream::stream::Stream, event: &DemoEvent) -> Result<bool, ProjectorError> {
    match stream.get_last_raw_message_by_subject(&event.subject).await {
        Ok(stored) => {
            let ours = ChangeEvent::decode(event.json.as_bytes()).ok();
            Ok(ours.is_some() && ChangeEvent::decode(&stored.payload).ok() == ours)
        }
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(false),
        Err(error) => Err(ProjectorError::Nats(format!(
            "reading the last message on {} to see whether the demo is published: {error}",
            event.subject
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Plans: each record's events, with instants and versions
// ---------------------------------------------------------------------------------------

/// Tags that keep the id and PRNG streams of contacts, items and events apart.
const CONTACT_TAG: u64 = 1;
const ITEM_TAG: u64 = 2;
const EVENT_TAG: u64 = 3;

/// Instants in milliseconds since the Unix epoch (checked by a test).
const DAY: i64 = 86_400_000;
/// 2025-01-06T00:00:00Z, a Monday: the first record is created that week.
const CREATED_FROM: i64 = 1_736_121_600_000;
/// Records are created over this many days of 2025.
const CREATED_OVER_DAYS: i64 = 340;
/// 2026-01-05T00:00:00Z: updates happen in January and February 2026.
const UPDATED_FROM: i64 = 1_767_571_200_000;
/// 2026-03-02T00:00:00Z: archiving happens in March 2026.
const ARCHIVED_FROM: i64 = 1_772_409_600_000;
/// 2026-04-07T10:00:00Z: the one restore.
const RESTORED_AT: i64 = 1_775_520_000_000 + 10 * 3_600_000;
/// 2026-04-14T09:00:00Z: the contact deleted.
const CONTACT_DELETED_AT: i64 = 1_776_124_800_000 + 9 * 3_600_000;
/// 2026-04-15T09:30:00Z: the item deleted, the demo's final event.
const ITEM_DELETED_AT: i64 = 1_776_211_200_000 + 9 * 3_600_000 + 30 * 60_000;

/// One event before rendering.
struct Planned {
    at: i64,
    entity: EntityKind,
    index: usize,
    version: i64,
    change: ChangeKind,
    data: Option<Value>,
}

impl Planned {
    fn render(self, workspace: Uuid) -> DemoEvent {
        let tag = match self.entity {
            EntityKind::Contact => CONTACT_TAG,
            EntityKind::Item => ITEM_TAG,
        };
        let entity_id = derived_id(workspace, &[tag, self.index as u64]);
        let event_id = derived_id(workspace, &[EVENT_TAG, tag, self.index as u64, self.version as u64]);
        let event_type = EventType { entity: self.entity, change: self.change };
        let mut envelope = vec![
            ("eventId", Value::from(event_id.to_string())),
            ("type", Value::from(event_type.to_string())),
            ("workspaceId", Value::from(workspace.to_string())),
            ("entityId", Value::from(entity_id.to_string())),
            ("version", Value::from(self.version)),
            ("occurredAt", Value::from(instant(self.at))),
        ];
        if let Some(data) = self.data {
            envelope.push(("data", data));
        }
        DemoEvent {
            subject: format!("changes.{workspace}.{}.{entity_id}", self.entity.subject_segment()),
            event_id,
            event_type,
            entity_id,
            version: self.version,
            json: object(envelope).to_string(),
        }
    }
}

/// Which records get which later events: a fixed share of a shuffled order, so the
/// sets overlap a little (some updated records are archived or deleted later).
struct Fates {
    archived: BTreeSet<usize>,
    updated: BTreeSet<usize>,
    deleted: usize,
    restored: Option<usize>,
}

impl Fates {
    fn draw(rng: &mut Prng, records: usize, restore_one: bool) -> Self {
        let mut order: Vec<usize> = (0..records).collect();
        rng.shuffle(&mut order);
        let archived = records / 10;
        let updated = records / 5;
        let at = |position: usize| order.get(position).copied().unwrap_or_default();
        Self {
            archived: order.iter().take(archived).copied().collect(),
            deleted: at(archived),
            restored: restore_one.then(|| at(archived + 1)),
            // Starts inside the archived share: one updated record in five is archived,
            // deleted or restored afterwards.
            updated: order.iter().skip(archived * 2 / 3).take(updated).copied().collect(),
        }
    }

    /// `index`'s events after `created`, in order: each with its instant and data.
    /// `update` is the record's state after its update, if it gets one.
    fn later_events(&self, rng: &mut Prng, index: usize, deleted_at: i64, update: Option<Value>) -> Vec<Step> {
        let mut later = Vec::new();
        if let Some(data) = update {
            later.push((within(rng, UPDATED_FROM, 53), ChangeKind::Updated, Some(data)));
        }
        if self.archived.contains(&index) || self.restored == Some(index) {
            later.push((within(rng, ARCHIVED_FROM, 29), ChangeKind::Archived, None));
        }
        if self.deleted == index {
            later.push((deleted_at, ChangeKind::Deleted, None));
        }
        later
    }
}

/// One event of one record: its instant, its change and the state it carries.
type Step = (i64, ChangeKind, Option<Value>);

/// An instant on one of the `days` days from `from`, in office hours.
fn within(rng: &mut Prng, from: i64, days: i64) -> i64 {
    from + rng.between(0, days - 1) * DAY + office_hours(rng)
}

/// 07:30 to 18:00, to the millisecond.
fn office_hours(rng: &mut Prng) -> i64 {
    rng.between(27_000_000, 64_800_000)
}

/// Record `index` of `records` is created on a weekday of 2025; later records later.
fn created_at(rng: &mut Prng, index: usize, records: usize) -> i64 {
    let day = (index as i64 * CREATED_OVER_DAYS) / records.max(1) as i64;
    // CREATED_FROM is a Monday: day 5 is a Saturday, day 6 a Sunday.
    let weekday_shift = match day % 7 {
        5 => 2,
        6 => 1,
        _ => 0,
    };
    CREATED_FROM + (day + weekday_shift) * DAY + office_hours(rng)
}

fn plan_contacts(rng: &mut Prng, records: usize) -> Vec<Planned> {
    let contacts = catalogue::contacts(rng, records);
    let fates = Fates::draw(rng, records, true);
    let mut planned = Vec::new();
    for (index, contact) in contacts.iter().enumerate() {
        let created = contact.created_at + rng.between(2_000, 90_000);
        let update = fates.updated.contains(&index).then(|| contact.updated(rng));
        let latest = update.as_ref().unwrap_or(contact).data();
        let mut steps = vec![(created, ChangeKind::Created, Some(contact.data()))];
        steps.extend(fates.later_events(rng, index, CONTACT_DELETED_AT, update.map(|next| next.data())));
        if fates.restored == Some(index) {
            // Restored as it was when archived.
            steps.push((RESTORED_AT, ChangeKind::Restored, Some(latest)));
        }
        planned.extend(numbered(EntityKind::Contact, index, steps));
    }
    planned
}

fn plan_items(rng: &mut Prng, records: usize) -> Vec<Planned> {
    let items = catalogue::items(rng, records);
    let fates = Fates::draw(rng, records, false);
    let mut planned = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let created = item.created_at + rng.between(2_000, 90_000);
        let update = fates.updated.contains(&index).then(|| item.updated(rng).data());
        let mut steps = vec![(created, ChangeKind::Created, Some(item.data()))];
        steps.extend(fates.later_events(rng, index, ITEM_DELETED_AT, update));
        planned.extend(numbered(EntityKind::Item, index, steps));
    }
    planned
}

/// Versions one record's steps 1, 2, 3, … in the order given.
fn numbered(entity: EntityKind, index: usize, steps: Vec<Step>) -> impl Iterator<Item = Planned> {
    steps.into_iter().zip(1..).map(move |((at, change, data), version)| Planned {
        at,
        entity,
        index,
        version,
        change,
        data,
    })
}

// ---------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------

/// A contact's full state, as `contact.created`/`updated`/`restored` carry it.
#[derive(Clone, Debug)]
struct ContactRecord {
    name: String,
    email: Option<String>,
    phone: Option<String>,
    address: Option<String>,
    tin: Option<String>,
    is_customer: bool,
    is_supplier: bool,
    created_at: i64,
    country: &'static Country,
    city: City,
    /// The contact's own mail domain, or `None` for a person with a mailbox provider.
    domain: Option<String>,
}

impl ContactRecord {
    fn data(&self) -> Value {
        object(vec![
            ("name", Value::from(self.name.clone())),
            ("email", Value::from(self.email.clone())),
            ("phone", Value::from(self.phone.clone())),
            ("address", Value::from(self.address.clone())),
            ("tin", Value::from(self.tin.clone())),
            ("isCustomer", Value::from(self.is_customer)),
            ("isSupplier", Value::from(self.is_supplier)),
            ("createdAt", Value::from(instant(self.created_at))),
        ])
    }

    /// The contact after one of the changes upstream systems typically send.
    fn updated(&self, rng: &mut Prng) -> Self {
        let mut next = self.clone();
        match rng.below(4) {
            0 => next.phone = Some(self.country.phone(rng, self.city)),
            1 => {
                // Moved within the country.
                next.city = rng.pick(self.country.cities);
                next.address = Some(self.country.address(rng, next.city));
            }
            2 => match &self.domain {
                Some(domain) => next.email = Some(format!("{}@{domain}", rng.pick(self.country.mailboxes))),
                None => next.email = self.email.as_ref().map(|email| email.replacen('.', "_", 1)),
            },
            _ => {
                // A customer starts supplying too, or a supplier buying.
                next.is_customer = true;
                next.is_supplier = true;
            }
        }
        if next.email.is_none() {
            next.email = self.domain.as_ref().map(|domain| format!("{}@{domain}", rng.pick(self.country.mailboxes)));
        }
        next
    }
}

/// An amount in a currency's minor units.
#[derive(Clone, Copy, Debug)]
struct Price {
    minor: i64,
    currency: &'static Currency,
}

impl Price {
    fn value(self) -> Value {
        object(vec![
            ("amount", Value::from(amount(self.minor, self.currency.decimals))),
            ("currency", Value::from(self.currency.code)),
        ])
    }
}

/// An item's full state, as `item.created`/`updated` carry it.
#[derive(Clone, Debug)]
struct ItemRecord {
    name: String,
    sku: Option<String>,
    description: Option<String>,
    kind: ItemType,
    unit: Option<&'static str>,
    sale: Option<Price>,
    purchase: Option<Price>,
    created_at: i64,
    template: &'static Template,
}

impl ItemRecord {
    fn data(&self) -> Value {
        object(vec![
            ("name", Value::from(self.name.clone())),
            ("sku", Value::from(self.sku.clone())),
            ("description", Value::from(self.description.clone())),
            ("type", Value::from(self.kind.as_str())),
            ("unit", Value::from(self.unit)),
            ("salePrice", self.sale.map_or(Value::Null, Price::value)),
            ("purchasePrice", self.purchase.map_or(Value::Null, Price::value)),
            ("createdAt", Value::from(instant(self.created_at))),
        ])
    }

    /// The item after a price rise of 3 to 9 % or a revised description.
    fn updated(&self, rng: &mut Prng) -> Self {
        let mut next = self.clone();
        if rng.chance(70) && self.sale.is_some_and(|sale| sale.minor > 0) {
            let percent = rng.between(3, 9);
            let rise = |price: Price| Price {
                minor: catalogue::round_price(price.minor * (100 + percent) / 100, price.currency),
                ..price
            };
            next.sale = self.sale.map(rise);
            next.purchase = self.purchase.map(|price| Price { minor: price.minor * (100 + percent) / 100, ..price });
        } else {
            next.description = Some(format!("{} {}", self.template.description, rng.pick(catalogue::REVISIONS)));
        }
        next
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------

fn object(fields: Vec<(&str, Value)>) -> Value {
    Value::Object(fields.into_iter().map(|(key, value)| (key.to_owned(), value)).collect::<Map<_, _>>())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as the contract renders instants.
fn instant(millis: i64) -> String {
    (DateTime::<Utc>::UNIX_EPOCH + TimeDelta::milliseconds(millis)).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `minor` units as a decimal string with the currency's `decimals` places: `"1234.50"`.
fn amount(minor: i64, decimals: u32) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let scale = 10_u64.pow(decimals);
    let (whole, fraction) = (minor.unsigned_abs() / scale, minor.unsigned_abs() % scale);
    if decimals == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction:0width$}", width = decimals as usize)
    }
}

/// A UUID that is a function of `workspace` and `parts` only (version 8, "custom"), so
/// ids are stable across runs, and differ between workspaces: event ids are JetStream's
/// duplicate keys for the whole stream.
fn derived_id(workspace: Uuid, parts: &[u64]) -> Uuid {
    let (high, low) = workspace.as_u64_pair();
    let mut state = mix(high ^ mix(low));
    for part in parts {
        state = mix(state ^ mix(*part));
    }
    let bytes = (u128::from(mix(state ^ 1)) << 64 | u128::from(mix(state ^ 2))).to_be_bytes();
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// SplitMix64's finaliser: a fixed, well-mixed function of its input.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64: tiny, fast, and fixed forever, unlike a library generator.
#[derive(Debug)]
struct Prng(u64);

impl Prng {
    fn new(workspace: Uuid, tag: u64) -> Self {
        let (high, low) = workspace.as_u64_pair();
        Self(mix(high ^ mix(low ^ mix(tag))))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: i64, high: i64) -> i64 {
        low + (self.next() % (high - low + 1).max(1) as u64) as i64
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy + Default>(&mut self, items: &[T]) -> T {
        items.get(self.below(items.len())).copied().unwrap_or_default()
    }

    /// `count` decimal digits, the first not 0.
    fn digits(&mut self, count: usize) -> String {
        (0..count)
            .map(|position| {
                let digit = if position == 0 { 1 + self.below(9) } else { self.below(10) };
                char::from(b'0' + digit as u8)
            })
            .collect()
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            items.swap(last, self.below(last + 1));
        }
    }
}

mod catalogue;

#[cfg(test)]
mod tests;
