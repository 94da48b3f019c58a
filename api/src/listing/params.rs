//! A listing's query parameter types. Each parses from text into a value that is valid
//! once it exists; they also describe themselves to the OpenAPI document.

use std::fmt;
use std::str::FromStr;

use poem_openapi::registry::MetaSchema;
use serde_json::Value;

use crate::query_values::{query_enum, query_param_type, whole_number};

query_enum! {
    /// The order of a listing: ascending, ties broken by id.
    SortKey { CreatedAt = "createdAt", Name = "name" }
}

/// Page size: a whole decimal number from 1 to 100; 50 when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit(u8);

impl Limit {
    pub const MAX: u8 = 100;

    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl Default for Limit {
    fn default() -> Self {
        Self(50)
    }
}

impl FromStr for Limit {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        whole_number(text, 1, Self::MAX).map(Self)
    }
}

query_param_type!(
    Limit,
    "Limit",
    {
        let mut schema = MetaSchema::new_with_format("integer", "int32");
        schema.minimum = Some(1.0);
        schema.maximum = Some(f64::from(Limit::MAX));
        schema
    },
    |limit: &Limit| Value::from(limit.0)
);

/// Search text: at most 120 Unicode characters, matched literally (`%`, `_`, `\` are
/// ordinary characters). Empty means no filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchText(String);

impl SearchText {
    pub const MAX_CHARS: usize = 120;
    /// Every character but NUL (JSON Schema's ECMA-262 dialect).
    pub const PATTERN: &'static str = "^[^\\u0000]*$";

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The filter this text asks for: `None` when it is empty.
    pub fn into_filter(self) -> Option<Self> {
        (!self.0.is_empty()).then_some(self)
    }

    /// The text as a LIKE pattern body with every wildcard and escape made literal.
    pub fn like_escaped(&self) -> String {
        let mut escaped = String::with_capacity(self.0.len() + 8);
        for c in self.0.chars() {
            if matches!(c, '\\' | '%' | '_') {
                escaped.push('\\');
            }
            escaped.push(c);
        }
        escaped
    }
}

impl FromStr for SearchText {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.chars().count() > Self::MAX_CHARS {
            return Err(format!("must be at most {} characters", Self::MAX_CHARS));
        }
        // PostgreSQL text cannot hold NUL, so no record can contain it.
        if text.contains('\0') {
            return Err("must not contain the NUL character".to_owned());
        }
        Ok(Self(text.to_owned()))
    }
}

query_param_type!(
    SearchText,
    "SearchText",
    {
        let mut schema = MetaSchema::new("string");
        schema.max_length = Some(SearchText::MAX_CHARS);
        // The one character refused besides the length: said here, so that a validator and
        // a generated client refuse it before the server does.
        schema.pattern = Some(SearchText::PATTERN.to_owned());
        schema.description = Some(
            "Text a record's searchable fields must contain (a substring, case-insensitive, `%` and `_` literal); at most 120 \
             characters, any but NUL (U+0000), which no stored text can contain.",
        );
        schema
    },
    |text: &SearchText| Value::String(text.0.clone())
);

/// A cursor as received, before its signature is checked.
#[derive(Clone, PartialEq, Eq)]
pub struct CursorToken(String);

impl CursorToken {
    /// Longer input is refused before decoding. A `sort=name` cursor carries the
    /// name, so this admits names up to about 6 KB (the request head may take 16 KiB).
    pub const MAX_LEN: usize = 8192;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CursorToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CursorToken({} chars)", self.0.len())
    }
}

impl FromStr for CursorToken {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty; omit it to start a new traversal".to_owned());
        }
        if text.len() > Self::MAX_LEN {
            return Err("is not a cursor issued by this API; start a new traversal without `cursor`".to_owned());
        }
        Ok(Self(text.to_owned()))
    }
}

query_param_type!(
    CursorToken,
    "Cursor",
    {
        let mut schema = MetaSchema::new("string");
        schema.min_length = Some(1);
        schema.max_length = Some(CursorToken::MAX_LEN);
        schema.description = Some(
            "The `page.nextCursor` of the previous page, passed unchanged. Cursors expire (after a day by \
             default): an expired, altered or foreign cursor is a 400 `VALIDATION_ERROR` naming `cursor`; \
             start the listing again from its first page.",
        );
        schema
    },
    |token: &CursorToken| Value::String(token.0.clone())
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_accepts_whole_numbers_from_1_to_100() {
        assert_eq!("1".parse::<Limit>().unwrap().get(), 1);
        assert_eq!("100".parse::<Limit>().unwrap().get(), 100);
        assert_eq!("050".parse::<Limit>().unwrap().get(), 50);
    }

    #[test]
    fn limit_refuses_everything_else() {
        for bad in ["", "0", "101", "1.5", "abc", "-1", "+5", " 5", "5 ", "1e2", "0x10", "9999", "٣"] {
            assert!(bad.parse::<Limit>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn search_length_is_counted_in_characters() {
        assert!("ä".repeat(120).parse::<SearchText>().is_ok());
        assert!("ä".repeat(121).parse::<SearchText>().is_err());
    }

    #[test]
    fn search_escapes_like_wildcards() {
        let text: SearchText = r"50%_off\x".parse().unwrap();
        assert_eq!(text.like_escaped(), r"50\%\_off\\x");
    }

    #[test]
    fn empty_search_is_no_filter() {
        assert!("".parse::<SearchText>().unwrap().into_filter().is_none());
    }

    #[test]
    fn sort_values_are_the_contracts() {
        assert_eq!("createdAt".parse::<SortKey>().unwrap(), SortKey::CreatedAt);
        assert_eq!("name".parse::<SortKey>().unwrap(), SortKey::Name);
        assert!("Name".parse::<SortKey>().is_err());
        assert_eq!(SortKey::default(), SortKey::CreatedAt);
    }
}
