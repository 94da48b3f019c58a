//! Request identifiers: reused from a well-formed `X-Request-Id`, otherwise made here,
//! and visible to every layer of the request through a task-local.

use std::borrow::Cow;
use std::fmt;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::Value;

/// The contract's RequestId pattern.
pub const REQUEST_ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$";

/// A request identifier that matches [`REQUEST_ID_PATTERN`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(String);

tokio::task_local! {
    static CURRENT: RequestId;
}

impl RequestId {
    /// Accepts a client's id only when it matches the pattern, so a hostile header
    /// can never reach logs or bodies.
    pub fn from_client(value: &str) -> Option<Self> {
        let bytes = value.as_bytes();
        let well_formed = (1..=128).contains(&bytes.len())
            && bytes[0].is_ascii_alphanumeric()
            && bytes[1..].iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        // `_` is allowed after the first character by the pattern, but never generated.
        well_formed.then(|| Self(value.to_owned()))
    }

    /// A fresh id: 32 hex digits, which the pattern accepts. Drawn from the thread's
    /// reseeding CSPRNG rather than `Uuid::new_v4`, which makes a `getrandom` system
    /// call for every request.
    pub fn generate() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the request being served, if called inside one.
    pub fn current() -> Self {
        CURRENT.try_with(Clone::clone).unwrap_or_else(|_| Self::generate())
    }

    /// Runs `future` with `self` as the current request's id. Not an `async fn`: one
    /// would hold `future` twice (as its argument and inside the scope it awaits), and
    /// this wraps the whole of every request (see `docs/architecture.md`, "What a
    /// waiting request costs").
    pub fn scope<F: std::future::Future>(self, future: F) -> impl std::future::Future<Output = F::Output> {
        CURRENT.scope(self, future)
    }

    /// Runs `f` with `self` as the current request's id.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self, f)
    }
}

impl serde::Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Type for RequestId {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "RequestId".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Reference("RequestId".to_owned())
    }

    fn register(registry: &mut Registry) {
        registry.create_schema::<Self, _>("RequestId".to_owned(), |_| {
            let mut schema = MetaSchema::new("string");
            schema.description = Some("Identifies the request; quote it when reporting a problem.");
            schema.min_length = Some(1);
            schema.max_length = Some(128);
            schema.pattern = Some(REQUEST_ID_PATTERN.to_owned());
            schema
        });
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ToJSON for RequestId {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.0.clone()))
    }
}

impl ParseFromJSON for RequestId {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(text) => {
                Self::from_client(&text).ok_or_else(|| ParseError::custom("does not match the RequestId pattern"))
            }
            other => Err(ParseError::expected_type(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_matching_the_pattern_are_reused() {
        for good in ["a", "A1", "req-1.2:3_4", &"x".repeat(128)] {
            assert_eq!(RequestId::from_client(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn client_ids_outside_the_pattern_are_replaced() {
        for bad in ["", "-a", "_a", ".a", "a b", "a/b", "ä", &"x".repeat(129), "a\n"] {
            assert!(RequestId::from_client(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn generated_ids_match_the_pattern_and_have_no_underscore() {
        let id = RequestId::generate();
        assert!(RequestId::from_client(id.as_str()).is_some());
        assert!(!id.as_str().contains('_'));
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| RequestId::generate().0).collect();
        assert_eq!(ids.len(), 10_000);
        // Leading zeros are kept: every id is the same length.
        let malformed = ids.iter().find(|id| id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(malformed, None);
    }
}
