//! Change events: the contract with upstream systems (`docs/events.md`;
//! the JSON Schemas in `schema/events/`). [`ChangeEvent::decode`] accepts exactly what
//! those schemas accept: unknown extra fields are ignored, unknown types rejected.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use uuid::Uuid;

use crate::Timestamp;

/// Which kind of record an event is about; also the subject's entity segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityKind {
    Contact,
    Item,
}

impl EntityKind {
    /// The subject segment: `changes.<workspace>.<segment>.<entity id>`.
    pub fn subject_segment(self) -> &'static str {
        match self {
            Self::Contact => "contacts",
            Self::Item => "items",
        }
    }

    fn type_prefix(self) -> &'static str {
        match self {
            Self::Contact => "contact",
            Self::Item => "item",
        }
    }
}

/// What happened to the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Created,
    Updated,
    Archived,
    Restored,
    Deleted,
}

impl ChangeKind {
    const ALL: [Self; 5] = [Self::Created, Self::Updated, Self::Archived, Self::Restored, Self::Deleted];

    fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Archived => "archived",
            Self::Restored => "restored",
            Self::Deleted => "deleted",
        }
    }

    /// Whether the event carries the full record (`created`, `updated`, `restored`).
    pub fn carries_state(self) -> bool {
        matches!(self, Self::Created | Self::Updated | Self::Restored)
    }
}

/// An event's `type`: entity and change, e.g. `contact.updated`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventType {
    pub entity: EntityKind,
    pub change: ChangeKind,
}

impl FromStr for EventType {
    type Err = EventError;
    fn from_str(text: &str) -> Result<Self, EventError> {
        for entity in [EntityKind::Contact, EntityKind::Item] {
            for change in ChangeKind::ALL {
                if text.strip_prefix(entity.type_prefix()).and_then(|rest| rest.strip_prefix('.'))
                    == Some(change.as_str())
                {
                    return Ok(Self { entity, change });
                }
            }
        }
        Err(EventError::UnknownType(text.chars().take(64).collect()))
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.entity.type_prefix(), self.change.as_str())
    }
}

/// `product` or `service`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Enum))]
#[cfg_attr(feature = "openapi", oai(rename_all = "lowercase"))]
pub enum ItemType {
    Product,
    Service,
}

impl ItemType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Product => "product",
            Self::Service => "service",
        }
    }

    /// The stored text (`items.type`) back as a type.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "product" => Some(Self::Product),
            "service" => Some(Self::Service),
            _ => None,
        }
    }
}

pub use crate::contact::ContactData;
pub use crate::item::ItemData;

/// The record state an event carries.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordState {
    Contact(ContactData),
    Item(ItemData),
}

/// A validated change event.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeEvent {
    pub event_id: Uuid,
    pub event_type: EventType,
    pub workspace_id: Uuid,
    pub entity_id: Uuid,
    /// At least 1; per entity, strictly increasing.
    pub version: i64,
    pub occurred_at: Timestamp,
    /// `Some` exactly when the type carries state.
    pub state: Option<RecordState>,
}

/// Why a message is not a valid change event. Every variant is a contract violation:
/// the message is dead-lettered, never retried as if the failure were transient.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("not valid JSON: {0}")]
    NotJson(String),
    #[error("schema violation: {0}")]
    Schema(String),
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("subject {subject:?} does not match the event ({expected})")]
    SubjectMismatch { subject: String, expected: String },
}

/// The envelope as it arrives; `data` is decoded once the type is known.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(deserialize_with = "uuid_text")]
    event_id: Uuid,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(deserialize_with = "uuid_text")]
    workspace_id: Uuid,
    #[serde(deserialize_with = "uuid_text")]
    entity_id: Uuid,
    version: i64,
    #[serde(deserialize_with = "instant")]
    occurred_at: Timestamp,
    #[serde(default)]
    data: Option<serde_json::Value>,
}

impl ChangeEvent {
    /// Decodes and validates one message body.
    pub fn decode(bytes: &[u8]) -> Result<Self, EventError> {
        let text = std::str::from_utf8(bytes).map_err(|_| EventError::NotUtf8)?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|error| EventError::NotJson(error.to_string()))?;
        let envelope: Envelope =
            serde_json::from_value(value).map_err(|error| EventError::Schema(error.to_string()))?;
        let event_type: EventType = envelope.event_type.parse()?;
        if envelope.version < 1 {
            return Err(EventError::Schema("version must be at least 1".to_owned()));
        }
        let data = envelope.data.filter(|data| !data.is_null());
        let state = match (event_type.change.carries_state(), data) {
            (true, None) => return Err(EventError::Schema(format!("{event_type} must carry data"))),
            (false, Some(_)) => return Err(EventError::Schema(format!("{event_type} must not carry data"))),
            (false, None) => None,
            (true, Some(data)) => Some(decode_state(event_type.entity, data)?),
        };
        Ok(Self {
            event_id: envelope.event_id,
            event_type,
            workspace_id: envelope.workspace_id,
            entity_id: envelope.entity_id,
            version: envelope.version,
            occurred_at: envelope.occurred_at,
            state,
        })
    }

    /// The subject this event must arrive on.
    pub fn expected_subject(&self) -> String {
        format!("changes.{}.{}.{}", self.workspace_id, self.event_type.entity.subject_segment(), self.entity_id)
    }

    /// Decodes a message and checks it arrived on its own subject, so an event can
    /// never write into a workspace other than the one its subject names. Ids compare
    /// as UUIDs, so upper- and lower-case spellings are the same id.
    pub fn decode_from(subject: &str, bytes: &[u8]) -> Result<Self, EventError> {
        let event = Self::decode(bytes)?;
        if !event.arrived_on(subject) {
            return Err(EventError::SubjectMismatch {
                subject: subject.chars().take(200).collect(),
                expected: event.expected_subject(),
            });
        }
        Ok(event)
    }

    fn arrived_on(&self, subject: &str) -> bool {
        let parts: Vec<&str> = subject.split('.').collect();
        let same_id = |text: &str, id: Uuid| Uuid::try_parse(text).is_ok_and(|parsed| parsed == id) && text.len() == 36;
        matches!(parts.as_slice(), ["changes", workspace, segment, entity]
            if same_id(workspace, self.workspace_id)
                && *segment == self.event_type.entity.subject_segment()
                && same_id(entity, self.entity_id))
    }
}

fn decode_state(entity: EntityKind, data: serde_json::Value) -> Result<RecordState, EventError> {
    let schema = |error: serde_json::Error| EventError::Schema(format!("data: {error}"));
    Ok(match entity {
        EntityKind::Contact => RecordState::Contact(serde_json::from_value(data).map_err(schema)?),
        EntityKind::Item => RecordState::Item(serde_json::from_value(data).map_err(schema)?),
    })
}

/// A required field that may be null (serde would otherwise accept it missing).
pub(crate) fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(deserializer)
}

pub(crate) fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.is_empty() {
        return Err(de::Error::custom("must be at least one character"));
    }
    Ok(text)
}

pub(crate) fn nullable_email<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let email = Option::<String>::deserialize(deserializer)?;
    match email {
        Some(text) if !is_email(&text) => Err(de::Error::custom(format!("{text:?} is not an email address"))),
        other => Ok(other),
    }
}

/// The schema's email pattern: `^[^@\s]+@[^@\s]+\.[^@\s]+$`.
pub fn is_email(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else { return false };
    let clean = |part: &str| !part.is_empty() && !part.contains('@') && !part.chars().any(char::is_whitespace);
    clean(local) && clean(domain) && domain.char_indices().any(|(at, c)| c == '.' && at > 0 && at + 1 < domain.len())
}

fn uuid_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Uuid, D::Error> {
    let text = String::deserialize(deserializer)?;
    // Only the hyphenated form the schema's pattern allows.
    if text.len() != 36 {
        return Err(de::Error::custom(format!("{text:?} is not a hyphenated UUID")));
    }
    Uuid::try_parse(&text).map_err(|_| de::Error::custom(format!("{text:?} is not a hyphenated UUID")))
}

pub(crate) fn instant<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
    let text = String::deserialize(deserializer)?;
    if !has_rfc3339_shape(&text) {
        return Err(de::Error::custom(format!("{text:?} is not an RFC 3339 date-time with a time zone")));
    }
    Timestamp::parse(&text).map_err(de::Error::custom)
}

/// The schema's instant pattern:
/// `^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$`.
fn has_rfc3339_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits =
        |range: std::ops::Range<usize>| bytes.get(range).is_some_and(|part| part.iter().all(u8::is_ascii_digit));
    let at = |index: usize, allowed: &[u8]| bytes.get(index).is_some_and(|byte| allowed.contains(byte));
    if !(digits(0..4) && at(4, b"-") && digits(5..7) && at(7, b"-") && digits(8..10) && at(10, b"Tt"))
        || !(digits(11..13) && at(13, b":") && digits(14..16) && at(16, b":") && digits(17..19))
    {
        return false;
    }
    let mut rest = &bytes[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let count = fraction.iter().take_while(|byte| byte.is_ascii_digit()).count();
        if count == 0 {
            return false;
        }
        rest = &fraction[count..];
    }
    match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|byte| byte.is_ascii_digit()),
        _ => false,
    }
}
