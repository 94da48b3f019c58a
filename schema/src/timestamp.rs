//! Instants as the contract writes them: UTC, exactly three fraction digits, `Z`.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The regular expression every rendered [`Timestamp`] matches; stated in the OpenAPI
/// document so clients can rely on it.
pub const TIMESTAMP_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$";

/// An instant that renders as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
///
/// The full stored precision is kept (keyset cursors need it to be exact); only the
/// rendering is cut to milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

/// Why a text is not an instant the contract can carry.
#[derive(Debug, thiserror::Error)]
pub enum TimestampError {
    #[error("not an RFC 3339 date-time with a time zone: {0}")]
    Syntax(#[from] chrono::ParseError),
    /// The contract renders four-digit years in UTC: 0000 to 9999.
    #[error("{0} is outside the years 0000 to 9999 in UTC")]
    OutOfRange(String),
}

impl Timestamp {
    /// Reads any RFC 3339 instant, whatever its offset, as UTC.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        let at = DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc);
        if Self::renderable(&at) {
            Ok(Self(at))
        } else {
            Err(TimestampError::OutOfRange(text.to_owned()))
        }
    }

    /// Whether `at` renders in the contract's format (a four-digit UTC year); an offset
    /// can push an instant written as year 9999 or 0000 out of that range.
    pub fn renderable(at: &DateTime<Utc>) -> bool {
        use chrono::Datelike;
        (0..=9999).contains(&at.year())
    }

    /// The instant with its full precision, for keyset positions.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(value: DateTime<Utc>) -> Self {
        Self(value)
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` is 24 bytes.
const RENDERED_LEN: usize = 24;

impl Timestamp {
    /// The contract's rendering, written into a buffer on the stack: every record of a
    /// page has one, and chrono's formatter builds a `String` for each. `None` for what
    /// that shape cannot hold (a year outside 0000-9999, a leap second), which
    /// [`fmt::Display`] leaves to chrono.
    fn rendered(&self) -> Option<[u8; RENDERED_LEN]> {
        use chrono::{Datelike, Timelike};
        let (date, time) = (self.0.date_naive(), self.0.time());
        let year = u32::try_from(date.year()).ok().filter(|year| *year <= 9999)?;
        if time.nanosecond() >= 1_000_000_000 {
            return None;
        }
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, value: u32| put_digits(&mut out[at..at + width], value);
        put(0, 4, year);
        put(5, 2, date.month());
        put(8, 2, date.day());
        put(11, 2, time.hour());
        put(14, 2, time.minute());
        put(17, 2, time.second());
        // Cut, not rounded, as chrono's `SecondsFormat::Millis` does.
        put(20, 3, time.nanosecond() / 1_000_000);
        Some(out)
    }
}

/// `value`'s last `slots.len()` decimal digits, zero-padded, into `slots`: the
/// timestamps of records and of log lines are written this way, without a formatter.
pub fn put_digits(slots: &mut [u8], mut value: u32) {
    for slot in slots.iter_mut().rev() {
        // A digit: `value % 10` is below 10.
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rendered() {
            Some(bytes) => f.write_str(std::str::from_utf8(&bytes).map_err(|_| fmt::Error)?),
            None => f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true)),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.rendered() {
            Some(bytes) => serializer.serialize_str(std::str::from_utf8(&bytes).map_err(serde::ser::Error::custom)?),
            None => serializer.collect_str(self),
        }
    }
}

impl crate::json::WriteJson for Timestamp {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), std::str::Utf8Error> {
        match self.rendered() {
            Some(bytes) => {
                out.push(b'"');
                out.extend_from_slice(&bytes);
                out.push(b'"');
            }
            None => crate::json::write_str(out, &self.to_string()),
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
mod openapi {
    use std::borrow::Cow;

    use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
    use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
    use serde_json::Value;

    use super::{Timestamp, TIMESTAMP_PATTERN};

    impl Type for Timestamp {
        const IS_REQUIRED: bool = true;
        type RawValueType = Self;
        type RawElementValueType = Self;

        fn name() -> Cow<'static, str> {
            "string_date-time_millis".into()
        }

        fn schema_ref() -> MetaSchemaRef {
            let mut schema = MetaSchema::new_with_format("string", "date-time");
            schema.pattern = Some(TIMESTAMP_PATTERN.to_owned());
            schema.example = Some(Value::String("2025-02-03T08:00:00.000Z".to_owned()));
            MetaSchemaRef::Inline(Box::new(schema))
        }

        fn as_raw_value(&self) -> Option<&Self::RawValueType> {
            Some(self)
        }

        fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
            Box::new(self.as_raw_value().into_iter())
        }
    }

    impl ToJSON for Timestamp {
        fn to_json(&self) -> Option<Value> {
            Some(Value::String(self.to_string()))
        }
    }

    impl ParseFromJSON for Timestamp {
        fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
            match value.unwrap_or_default() {
                Value::String(text) => Timestamp::parse(&text).map_err(ParseError::custom),
                other => Err(ParseError::expected_type(other)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn renders_exactly_three_fraction_digits_and_z() {
        let whole_second = Timestamp::from(Utc.with_ymd_and_hms(2025, 2, 3, 8, 0, 0).unwrap());
        assert_eq!(whole_second.to_string(), "2025-02-03T08:00:00.000Z");

        let micros = Timestamp::parse("2025-02-03T08:00:00.123456+00:00").unwrap();
        assert_eq!(micros.to_string(), "2025-02-03T08:00:00.123Z");
    }

    #[test]
    fn keeps_full_precision_for_positions() {
        let micros = Timestamp::parse("2025-02-03T08:00:00.123456Z").unwrap();
        assert_eq!(micros.as_datetime().timestamp_subsec_micros(), 123_456);
    }

    #[test]
    fn reads_other_offsets_as_utc() {
        let berlin = Timestamp::parse("2025-02-03T09:00:00.5+01:00").unwrap();
        assert_eq!(berlin.to_string(), "2025-02-03T08:00:00.500Z");
    }

    /// The stack rendering must be chrono's, character for character, wherever it is
    /// used: every instant PostgreSQL can store in years 0000-9999, any sub-second part.
    #[test]
    fn the_fast_rendering_is_chronos_rendering_for_every_year_from_0000_to_9999() {
        let first = Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap().timestamp();
        let last = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap().timestamp();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let span = u64::try_from(last - first).unwrap();
        let edges = [first, last, 0, 951_782_400, 1_709_164_800];
        let random: Vec<(i64, u64)> =
            (0..200_000).map(|_| (first + i64::try_from(next() % (span + 1)).unwrap(), next())).collect();
        let instants = edges.into_iter().map(|seconds| (seconds, 0)).chain(random);
        for (n, (seconds, noise)) in instants.enumerate() {
            let nanos = match n % 3 {
                0 => 0,
                1 => u32::try_from(noise % 1_000_000_000).unwrap(),
                _ => 999_999_999,
            };
            let at = Utc.timestamp_opt(seconds, nanos).unwrap();
            let expected = at.to_rfc3339_opts(SecondsFormat::Millis, true);
            assert_eq!(Timestamp::from(at).to_string(), expected);
            assert_eq!(serde_json::to_string(&Timestamp::from(at)).unwrap(), format!("\"{expected}\""));
        }
    }

    #[test]
    fn instants_outside_the_contracts_years_still_render_as_chrono_renders_them() {
        for at in
            [Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(-1, 1, 1, 0, 0, 0).unwrap()]
        {
            assert_eq!(Timestamp::from(at).to_string(), at.to_rfc3339_opts(SecondsFormat::Millis, true));
        }
    }

    #[test]
    fn rejects_an_instant_without_a_zone() {
        assert!(Timestamp::parse("2025-02-03T08:00:00").is_err());
    }
}
