//! Money: an exact decimal amount and an ISO 4217 currency code. Never a float.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::json::{write_object, WriteJson};

/// Longest amount accepted, in characters; far beyond any real price, and small enough
/// that PostgreSQL's `numeric` holds it exactly.
const MAX_AMOUNT_LEN: usize = 40;

/// `{ "amount": "12.50", "currency": "EUR" }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
#[cfg_attr(feature = "openapi", oai(deny_unknown_fields))]
pub struct Money {
    /// Exact decimal amount as a string; negative for credits.
    pub amount: Amount,
    /// ISO 4217 currency code.
    pub currency: Currency,
}

/// The amount's pattern, stated in the OpenAPI document and the event schema.
pub const AMOUNT_PATTERN: &str = r"^-?[0-9]+(\.[0-9]+)?$";
/// The currency's pattern.
pub const CURRENCY_PATTERN: &str = "^[A-Z]{3}$";

/// A decimal amount as text matching `^-?[0-9]+(\.[0-9]+)?$`; kept as written so
/// `"0.10"` stays `"0.10"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount(String);

/// Three upper-case letters (`^[A-Z]{3}$`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Currency(String);

impl Amount {
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::check(text).map(|()| Self(text.to_owned()))
    }

    fn check(text: &str) -> Result<(), String> {
        let digits = text.strip_prefix('-').unwrap_or(text);
        let (whole, fraction) = match digits.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (digits, None),
        };
        let all_digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if text.len() <= MAX_AMOUNT_LEN && all_digits(whole) && fraction.is_none_or(all_digits) {
            Ok(())
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
        Self::check(text).map(|()| Self(text.to_owned()))
    }

    fn check(text: &str) -> Result<(), String> {
        if text.len() == 3 && text.bytes().all(|b| b.is_ascii_uppercase()) {
            Ok(())
        } else {
            Err(format!("{text:?} is not an ISO 4217 currency code such as \"EUR\""))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A [`Money`] that borrows its text, checked by the same rules; writes exactly the JSON
/// of [`Money`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoneyRef<'a> {
    amount: &'a str,
    currency: &'a str,
}

impl<'a> MoneyRef<'a> {
    pub fn new(amount: &'a str, currency: &'a str) -> Result<Self, String> {
        Amount::check(amount)?;
        Currency::check(currency)?;
        Ok(Self { amount, currency })
    }
}

impl WriteJson for MoneyRef<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), std::str::Utf8Error> {
        write_object!(out, "amount" => self.amount, "currency" => self.currency)
    }
}

impl Money {
    /// This amount, borrowed.
    pub fn borrowed(&self) -> MoneyRef<'_> {
        MoneyRef { amount: &self.amount.0, currency: &self.currency.0 }
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

#[cfg(feature = "openapi")]
mod openapi {
    use std::borrow::Cow;

    use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
    use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
    use serde_json::Value;

    use super::{Amount, Currency, AMOUNT_PATTERN, CURRENCY_PATTERN};

    macro_rules! pattern_string {
        ($ty:ty, $name:literal, $pattern:expr, $example:literal) => {
            impl Type for $ty {
                const IS_REQUIRED: bool = true;
                type RawValueType = Self;
                type RawElementValueType = Self;

                fn name() -> Cow<'static, str> {
                    $name.into()
                }

                fn schema_ref() -> MetaSchemaRef {
                    let mut schema = MetaSchema::new("string");
                    schema.pattern = Some($pattern.to_owned());
                    schema.example = Some(Value::String($example.to_owned()));
                    MetaSchemaRef::Inline(Box::new(schema))
                }

                fn as_raw_value(&self) -> Option<&Self::RawValueType> {
                    Some(self)
                }

                fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
                    Box::new(self.as_raw_value().into_iter())
                }
            }

            impl ToJSON for $ty {
                fn to_json(&self) -> Option<Value> {
                    Some(Value::String(self.0.clone()))
                }
            }

            impl ParseFromJSON for $ty {
                fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
                    match value.unwrap_or_default() {
                        Value::String(text) => Self::parse(&text).map_err(ParseError::custom),
                        other => Err(ParseError::expected_type(other)),
                    }
                }
            }
        };
    }

    pattern_string!(Amount, "Amount", AMOUNT_PATTERN, "12.50");
    pattern_string!(Currency, "Currency", CURRENCY_PATTERN, "EUR");
}

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
