//! The feed's query parameters. Each parses from text into a value that is valid once
//! it exists, and describes itself to the OpenAPI document.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use poem_openapi::registry::MetaSchema;
use serde_json::Value;

use crate::query_values::{query_param_type, whole_number};

/// `since` as received: `latest`, or a token whose signature is checked later.
#[derive(Clone, PartialEq, Eq)]
pub enum Since {
    Latest,
    Token(String),
}

impl Since {
    /// Longer input cannot be a token of ours (the document says so); it is refused when
    /// the token is opened, before decoding, with every other token the feed cannot take.
    pub const MAX_LEN: usize = 256;
}

impl fmt::Debug for Since {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Latest => f.write_str("Latest"),
            Self::Token(token) => write!(f, "Token({} chars)", token.len()),
        }
    }
}

impl FromStr for Since {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "" => Err("must not be empty; omit it to start from the beginning of the feed".to_owned()),
            "latest" => Ok(Self::Latest),
            _ => Ok(Self::Token(text.to_owned())),
        }
    }
}

query_param_type!(
    Since,
    "SyncToken",
    {
        let mut schema = MetaSchema::new("string");
        schema.min_length = Some(1);
        schema.max_length = Some(Since::MAX_LEN);
        schema.description = Some(
            "A `syncToken` of an earlier response of this operation, passed unchanged, or `latest`. Sync \
             tokens never expire. A token the feed cannot continue from (altered, of another workspace or \
             operation, or ahead of what the database holds after a restore) is a 400 `VALIDATION_ERROR` \
             whose `details` is a `RefusedSyncToken` with `startOver: true`: sync again from the beginning, \
             without `since`.",
        );
        schema
    },
    |since: &Since| match since {
        Since::Latest => Value::String("latest".to_owned()),
        Since::Token(token) => Value::String(token.clone()),
    }
);

/// Changes per response: 1 to 100; 100 when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedLimit(u8);

impl FeedLimit {
    pub const MAX: u8 = 100;

    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl Default for FeedLimit {
    fn default() -> Self {
        Self(Self::MAX)
    }
}

impl FromStr for FeedLimit {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        whole_number(text, 1, Self::MAX).map(Self)
    }
}

query_param_type!(
    FeedLimit,
    "FeedLimit",
    {
        let mut schema = MetaSchema::new_with_format("integer", "int32");
        schema.minimum = Some(1.0);
        schema.maximum = Some(f64::from(FeedLimit::MAX));
        schema
    },
    |limit: &FeedLimit| Value::from(limit.0)
);

/// How long to hold a request that finds nothing new: 0 to 30 seconds; 0 when absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitSeconds(u8);

impl WaitSeconds {
    pub const MAX: u8 = 30;

    pub fn duration(self) -> Duration {
        Duration::from_secs(u64::from(self.0))
    }
}

impl FromStr for WaitSeconds {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        whole_number(text, 0, Self::MAX).map(Self)
    }
}

query_param_type!(
    WaitSeconds,
    "WaitSeconds",
    {
        let mut schema = MetaSchema::new_with_format("integer", "int32");
        schema.minimum = Some(0.0);
        schema.maximum = Some(f64::from(WaitSeconds::MAX));
        schema
    },
    |wait: &WaitSeconds| Value::from(wait.0)
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_1_to_100_and_100_by_default() {
        assert_eq!(FeedLimit::default().get(), 100);
        assert_eq!("1".parse::<FeedLimit>().unwrap().get(), 1);
        assert_eq!("100".parse::<FeedLimit>().unwrap().get(), 100);
        for bad in ["", "0", "101", "1.5", "-1", "+5", " 5", "1e2", "٣", "256"] {
            assert!(bad.parse::<FeedLimit>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn wait_is_0_to_30_seconds_and_0_by_default() {
        assert_eq!(WaitSeconds::default().duration(), Duration::ZERO);
        assert_eq!("30".parse::<WaitSeconds>().unwrap().duration(), Duration::from_secs(30));
        assert_eq!("0".parse::<WaitSeconds>().unwrap().duration(), Duration::ZERO);
        for bad in ["", "31", "-1", "1.0", "5s", "true"] {
            assert!(bad.parse::<WaitSeconds>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn since_is_latest_or_a_token_never_empty() {
        assert_eq!("latest".parse::<Since>(), Ok(Since::Latest));
        assert_eq!("abc".parse::<Since>(), Ok(Since::Token("abc".to_owned())));
        assert!("".parse::<Since>().is_err());
        // Refused when opened, as every token the feed cannot take, so that it too is told
        // to start over.
        let long = "a".repeat(Since::MAX_LEN + 1);
        assert_eq!(long.parse::<Since>(), Ok(Since::Token(long)));
    }
}
