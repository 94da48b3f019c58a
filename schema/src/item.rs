//! The Item record: a product or service a workspace sells or buys.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::events::ItemType;
use std::str::Utf8Error;

use crate::json::{write_object, Text, WriteJson};
use crate::money::{Money, MoneyRef};
use crate::Timestamp;

/// One active item, as served by `listItems` and `getItem`.
///
/// Every field is always present; the optional ones are `null` when empty. Prices are
/// exact decimal strings with their currency, never floats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase", deny_unknown_fields))]
pub struct Item {
    /// The item's id, unique within its workspace.
    pub id: Uuid,
    /// Display name; never empty.
    #[cfg_attr(feature = "openapi", oai(validator(min_length = 1)))]
    pub name: String,
    /// Stock-keeping unit code.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub sku: Option<String>,
    /// Free-text description.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub description: Option<String>,
    /// `product` or `service`.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", oai(rename = "type"))]
    pub kind: ItemType,
    /// Unit of sale, e.g. `hour` or `pcs`.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub unit: Option<String>,
    /// Price the workspace sells at.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub sale_price: Option<Money>,
    /// Price the workspace buys at.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub purchase_price: Option<Money>,
    /// When the item was created upstream.
    pub created_at: Timestamp,
}

/// The full state of an item, as an item event that carries state holds it in `data`:
/// the upstream contract, and what the read model stores.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemData {
    #[serde(deserialize_with = "crate::events::non_empty")]
    pub name: String,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub sku: Option<String>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub description: Option<String>,
    #[serde(rename = "type")]
    pub kind: ItemType,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub unit: Option<String>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub sale_price: Option<Money>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub purchase_price: Option<Money>,
    #[serde(deserialize_with = "crate::events::instant")]
    pub created_at: Timestamp,
}

impl ItemData {
    /// An item named `name` of `kind`, created at `created_at`, every optional field
    /// empty: fixtures and tests set what they need on top.
    pub fn new(name: impl Into<String>, kind: ItemType, created_at: Timestamp) -> Self {
        Self {
            name: name.into(),
            sku: None,
            description: None,
            kind,
            unit: None,
            sale_price: None,
            purchase_price: None,
            created_at,
        }
    }
}

/// An [`Item`] that borrows its text, e.g. from the database row it was read from. It
/// writes exactly the JSON of [`Item`], the documented type (tested below).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ItemRef<'a> {
    pub id: Uuid,
    pub name: Text<'a>,
    pub sku: Option<Text<'a>>,
    pub description: Option<Text<'a>>,
    pub kind: ItemType,
    pub unit: Option<Text<'a>>,
    pub sale_price: Option<MoneyRef<'a>>,
    pub purchase_price: Option<MoneyRef<'a>>,
    pub created_at: Timestamp,
}

impl WriteJson for ItemRef<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        write_object!(out,
            "id" => self.id,
            "name" => self.name,
            "sku" => self.sku,
            "description" => self.description,
            "type" => self.kind.as_str(),
            "unit" => self.unit,
            "salePrice" => self.sale_price,
            "purchasePrice" => self.purchase_price,
            "createdAt" => self.created_at,
        )
    }
}

impl Item {
    /// This item, borrowed.
    pub fn borrowed(&self) -> ItemRef<'_> {
        ItemRef {
            id: self.id,
            name: Text::from(self.name.as_str()),
            sku: self.sku.as_deref().map(Text::from),
            description: self.description.as_deref().map(Text::from),
            kind: self.kind,
            unit: self.unit.as_deref().map(Text::from),
            sale_price: self.sale_price.as_ref().map(Money::borrowed),
            purchase_price: self.purchase_price.as_ref().map(Money::borrowed),
            created_at: self.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;

    use super::*;
    use crate::arbitrary::text;
    use crate::money::{Amount, Currency};

    fn money() -> impl Strategy<Value = Money> {
        ("-?[0-9]{1,12}(\\.[0-9]{1,6})?", "[A-Z]{3}").prop_map(|(amount, currency)| Money {
            amount: Amount::parse(&amount).unwrap(),
            currency: Currency::parse(&currency).unwrap(),
        })
    }

    prop_compose! {
        fn item()(
            id in any::<u128>(),
            name in text(),
            sku in proptest::option::of(text()),
            description in proptest::option::of(text()),
            product in any::<bool>(),
            unit in proptest::option::of(text()),
            sale_price in proptest::option::of(money()),
            purchase_price in proptest::option::of(money()),
            seconds in 0_i64..253_402_300_799,
            nanos in 0_u32..1_000_000_000,
        ) -> Item {
            Item {
                id: Uuid::from_u128(id),
                name, sku, description,
                kind: if product { ItemType::Product } else { ItemType::Service },
                unit, sale_price, purchase_price,
                created_at: Timestamp::from(Utc.timestamp_opt(seconds, nanos).unwrap()),
            }
        }
    }

    proptest! {
        /// Pages are written from borrowed items; the document describes `Item`.
        #[test]
        fn a_borrowed_item_is_written_byte_for_byte_as_the_documented_item(item in item()) {
            let mut written = Vec::new();
            item.borrowed().write_json(&mut written).unwrap();
            prop_assert_eq!(written, serde_json::to_vec(&item).unwrap());
        }
    }

    #[test]
    fn a_borrowed_price_is_checked_by_the_rules_of_the_owned_one() {
        assert!(MoneyRef::new("12.50", "EUR").is_ok());
        for (amount, currency) in [("12.", "EUR"), ("1e3", "EUR"), ("12.50", "eur"), ("12.50", "EURO"), ("", "EUR")] {
            assert_eq!(
                MoneyRef::new(amount, currency).is_ok(),
                Amount::parse(amount).is_ok() && Currency::parse(currency).is_ok(),
                "{amount:?} {currency:?}"
            );
            assert!(MoneyRef::new(amount, currency).is_err(), "{amount:?} {currency:?}");
        }
    }
}
