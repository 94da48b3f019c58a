//! Money: an exact decimal amount and an ISO 4217 currency code. Never a float.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// Longest amount accepted, in characters; far beyond any real price, and small enough
/// that PostgreSQL's `numeric` holds it exactly.
const MAX_AMOUNT_LEN: usize = 40;

/// `{ "amount": "12.50", "currency": "EUR" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Money {
    pub amount: Amount,
    pub currency: Currency,
}

/// A decimal amount as text matching `^-?[0-9]+(\.[0-9]+)?$`; kept as written so
/// `"0.10"` stays `"0.10"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount(String);

/// Three upper-case letters (`^[A-Z]{3}$`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Currency(String);

impl Amount {
    pub fn parse(text: &str) -> Result<Self, String> {
        let digits = text.strip_prefix('-').unwrap_or(text);
        let (whole, fraction) = match digits.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (digits, None),
        };
        let all_digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if text.len() <= MAX_AMOUNT_LEN && all_digits(whole) && fraction.is_none_or(all_digits) {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("{text:?} is not a decimal amount such as \"12.50\""))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Currency {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() == 3 && text.bytes().all(|b| b.is_ascii_uppercase()) {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("{text:?} is not an ISO 4217 currency code such as \"EUR\""))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! text_serde {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // Only a JSON string: a number (a float amount) is refused here.
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).map_err(de::Error::custom)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_serde!(Amount);
text_serde!(Currency);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_decimal_strings() {
        for good in ["0", "0.10", "-12.5", "12345678901234.5678", "007"] {
            assert_eq!(Amount::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "-", "1.", ".5", "+1", "1e3", "1,5", " 1", "1.2.3", "NaN", &"9".repeat(41)] {
            assert!(Amount::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_float_amount_is_refused() {
        let error = serde_json::from_str::<Money>(r#"{"amount": 12.5, "currency": "EUR"}"#);
        assert!(error.is_err());
    }

    #[test]
    fn currencies_are_three_capitals() {
        assert!(Currency::parse("EUR").is_ok());
        for bad in ["eur", "EURO", "EU", "E1R", "ÄUR"] {
            assert!(Currency::parse(bad).is_err(), "{bad:?}");
        }
    }
}
