//! One contact or item, derived from its position alone, and its change events as
//! upstream systems publish them (subject, `Nats-Msg-Id`, JSON body).

use chrono::{DateTime, SecondsFormat};
use uuid::Uuid;

use super::catalogue::{self, PROVIDERS, TEMPLATES, VARIANTS};
use super::plan::{salt, Entity, Plan, Record, CONTACT, EVENT, ITEM};
use super::prng::{derived_id, Prng};

#[derive(Clone, Debug)]
pub struct Contact {
    pub workspace_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub address: Option<String>,
    pub tin: Option<String>,
    pub is_customer: bool,
    pub is_supplier: bool,
    /// Milliseconds since the epoch.
    pub created_at: i64,
}

#[derive(Clone, Debug)]
pub struct Item {
    pub workspace_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub sku: Option<String>,
    pub description: Option<String>,
    pub kind: &'static str,
    pub unit: Option<&'static str>,
    /// (amount as a decimal string, currency)
    pub sale: Option<(String, &'static str)>,
    pub purchase: Option<(String, &'static str)>,
    pub created_at: i64,
}

/// A change event ready to publish.
#[derive(Clone, Debug)]
pub struct Event {
    pub subject: String,
    pub event_id: Uuid,
    pub json: String,
}

pub fn contact(plan: &Plan, record: Record) -> Contact {
    let mut rng = Prng::new(&[CONTACT, u64::from(record.workspace), u64::from(record.index)]);
    let country = catalogue::country(&mut rng);
    let person = rng.chance(25);
    let (name, email) = if person {
        let (first, last) = (rng.pick(country.first_names), rng.pick(country.last_names));
        (format!("{first} {last}"), format!("{}.{}@{}", slug(first), slug(last), rng.pick(PROVIDERS)))
    } else {
        let (trade, family) = (rng.pick(country.trades), rng.pick(country.last_names));
        let core = if country.trade_first { format!("{trade} {family}") } else { format!("{family} {trade}") };
        let email = format!("{}@{}.example", rng.pick(country.mailboxes), slug(&core));
        (format!("{core} {}", rng.pick(country.legal_forms)), email)
    };
    let city = rng.pick(country.cities);
    let role = rng.below(100);
    Contact {
        workspace_id: plan.workspaces[record.workspace as usize].id,
        id: plan.record_id(record),
        email: (!rng.chance(4)).then_some(email),
        phone: (!rng.chance(10)).then(|| country.phone(&mut rng, city)),
        address: (!rng.chance(if person { 15 } else { 5 })).then(|| country.address(&mut rng, city)),
        tin: (!person || rng.chance(30)).then(|| country.tin(&mut rng)),
        name,
        is_customer: !(55..85).contains(&role),
        is_supplier: role >= 55,
        created_at: plan.created_at(record),
    }
}

pub fn item(plan: &Plan, record: Record) -> Item {
    let mut rng = Prng::new(&[ITEM, u64::from(record.workspace), u64::from(record.index)]);
    let (name, description, kind, unit, prefix, price) = rng.pick(TEMPLATES);
    let variant = rng.pick(VARIANTS);
    // One currency per workspace, as a company usually prices in its own.
    let currency = catalogue::country(&mut Prng::new(&[ITEM, u64::from(record.workspace)])).currency;
    let sale = price * rng.between(80, 130) / 100;
    Item {
        workspace_id: plan.workspaces[record.workspace as usize].id,
        id: plan.record_id(record),
        name: if variant.is_empty() { name.to_owned() } else { format!("{name}, {variant}") },
        sku: (!rng.chance(10)).then(|| format!("{prefix}-{}", rng.digits(4))),
        description: (!rng.chance(15)).then(|| description.to_owned()),
        kind,
        unit,
        sale: Some((cents(sale), currency)),
        purchase: (kind == "product").then(|| (cents(sale * rng.between(45, 75) / 100), currency)),
        created_at: plan.created_at(record),
    }
}

impl Contact {
    pub fn event(&self, workspace: u32, index: u32, version: i64, change: &str, occurred_at: i64) -> Event {
        let data = format!(
            r#"{{"name":{},"email":{},"phone":{},"address":{},"tin":{},"isCustomer":{},"isSupplier":{},"createdAt":"{}"}}"#,
            text(&self.name),
            nullable(self.email.as_deref()),
            nullable(self.phone.as_deref()),
            nullable(self.address.as_deref()),
            nullable(self.tin.as_deref()),
            self.is_customer,
            self.is_supplier,
            instant(self.created_at)
        );
        envelope(Entity::Contact, (workspace, index), (self.workspace_id, self.id), version, change, occurred_at, &data)
    }
}

impl Item {
    pub fn event(&self, workspace: u32, index: u32, version: i64, change: &str, occurred_at: i64) -> Event {
        let money = |price: &Option<(String, &str)>| match price {
            Some((amount, currency)) => format!(r#"{{"amount":"{amount}","currency":"{currency}"}}"#),
            None => "null".to_owned(),
        };
        let data = format!(
            r#"{{"name":{},"sku":{},"description":{},"type":"{}","unit":{},"salePrice":{},"purchasePrice":{},"createdAt":"{}"}}"#,
            text(&self.name),
            nullable(self.sku.as_deref()),
            nullable(self.description.as_deref()),
            self.kind,
            nullable(self.unit),
            money(&self.sale),
            money(&self.purchase),
            instant(self.created_at)
        );
        envelope(Entity::Item, (workspace, index), (self.workspace_id, self.id), version, change, occurred_at, &data)
    }
}

fn envelope(
    entity: Entity,
    (workspace, index): (u32, u32),
    (workspace_id, entity_id): (Uuid, Uuid),
    version: i64,
    change: &str,
    occurred_at: i64,
    data: &str,
) -> Event {
    let event_id = derived_id(&[EVENT, salt(entity), u64::from(workspace), u64::from(index), version as u64]);
    let (singular, plural) = match entity {
        Entity::Contact => ("contact", "contacts"),
        Entity::Item => ("item", "items"),
    };
    Event {
        subject: format!("changes.{workspace_id}.{plural}.{entity_id}"),
        event_id,
        json: format!(
            r#"{{"eventId":"{event_id}","type":"{singular}.{change}","workspaceId":"{workspace_id}","entityId":"{entity_id}","version":{version},"occurredAt":"{}","data":{data}}}"#,
            instant(occurred_at)
        ),
    }
}

/// The `created` event of `record`, as the backlog holds it.
pub fn created_event(plan: &Plan, record: Record) -> Event {
    let occurred_at = plan.created_at(record) + 1_500;
    match record.entity {
        Entity::Contact => contact(plan, record).event(record.workspace, record.index, 1, "created", occurred_at),
        Entity::Item => item(plan, record).event(record.workspace, record.index, 1, "created", occurred_at),
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as the contract renders instants.
pub fn instant(millis: i64) -> String {
    DateTime::from_timestamp_millis(millis).unwrap_or_default().to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn cents(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

fn text(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

fn nullable(value: Option<&str>) -> String {
    value.map_or_else(|| "null".to_owned(), text)
}

/// Lower-case ASCII for mail addresses: "Schäfer Logistik" → "schaefer-logistik".
fn slug(text: &str) -> String {
    let mut slug = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        match c {
            'ä' | 'å' => slug.push_str(if c == 'ä' { "ae" } else { "a" }),
            'ö' => slug.push_str("oe"),
            'ü' => slug.push_str("ue"),
            'ß' => slug.push_str("ss"),
            'é' | 'è' | 'ê' => slug.push('e'),
            'í' => slug.push('i'),
            'ç' => slug.push('c'),
            c if c.is_ascii_alphanumeric() => slug.push(c),
            _ if !slug.ends_with('-') && !slug.is_empty() => slug.push('-'),
            _ => {}
        }
    }
    slug.trim_end_matches('-').to_owned()
}
