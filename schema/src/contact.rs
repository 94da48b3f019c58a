//! The Contact record: a customer or supplier of a workspace.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use std::str::Utf8Error;

use crate::json::{write_object, Text, WriteJson};
use crate::Timestamp;

/// One active contact, as served by `listContacts` and `getContact`.
///
/// Every field is always present; the optional ones are `null` when empty. The
/// workspace is deliberately absent: it is implied by the API key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(poem_openapi::Object))]
#[cfg_attr(feature = "openapi", oai(rename_all = "camelCase", deny_unknown_fields))]
pub struct Contact {
    /// The contact's id, unique within its workspace.
    pub id: Uuid,
    /// Display name; never empty.
    #[cfg_attr(feature = "openapi", oai(validator(min_length = 1)))]
    pub name: String,
    /// Email address.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub email: Option<String>,
    /// Phone number, as entered upstream.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub phone: Option<String>,
    /// Postal address, as one line.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub address: Option<String>,
    /// Tax identification number.
    #[cfg_attr(feature = "openapi", oai(nullable))]
    pub tin: Option<String>,
    /// Whether the contact buys from the workspace.
    pub is_customer: bool,
    /// Whether the contact sells to the workspace.
    pub is_supplier: bool,
    /// When the contact was created upstream.
    pub created_at: Timestamp,
}

/// The full state of a contact, as a contact event that carries state holds it in
/// `data`: the upstream contract, and what the read model stores.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContactData {
    #[serde(deserialize_with = "crate::events::non_empty")]
    pub name: String,
    #[serde(deserialize_with = "crate::events::nullable_email")]
    pub email: Option<String>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub phone: Option<String>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub address: Option<String>,
    #[serde(deserialize_with = "crate::events::nullable")]
    pub tin: Option<String>,
    pub is_customer: bool,
    pub is_supplier: bool,
    #[serde(deserialize_with = "crate::events::instant")]
    pub created_at: Timestamp,
}

impl ContactData {
    /// A contact named `name`, created at `created_at`, neither customer nor supplier, every
    /// optional field empty: fixtures and tests set what they need on top, so a new
    /// optional field needs no change there.
    pub fn new(name: impl Into<String>, created_at: Timestamp) -> Self {
        Self {
            name: name.into(),
            email: None,
            phone: None,
            address: None,
            tin: None,
            is_customer: false,
            is_supplier: false,
            created_at,
        }
    }
}

/// A [`Contact`] that borrows its text, e.g. from the database row it was read from, so
/// that a page of them is written without a copy of any field. It writes exactly the
/// JSON of [`Contact`], the documented type (tested below).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContactRef<'a> {
    pub id: Uuid,
    pub name: Text<'a>,
    pub email: Option<Text<'a>>,
    pub phone: Option<Text<'a>>,
    pub address: Option<Text<'a>>,
    pub tin: Option<Text<'a>>,
    pub is_customer: bool,
    pub is_supplier: bool,
    pub created_at: Timestamp,
}

impl WriteJson for ContactRef<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        write_object!(out,
            "id" => self.id,
            "name" => self.name,
            "email" => self.email,
            "phone" => self.phone,
            "address" => self.address,
            "tin" => self.tin,
            "isCustomer" => self.is_customer,
            "isSupplier" => self.is_supplier,
            "createdAt" => self.created_at,
        )
    }
}

impl Contact {
    /// This contact, borrowed.
    pub fn borrowed(&self) -> ContactRef<'_> {
        ContactRef {
            id: self.id,
            name: Text::from(self.name.as_str()),
            email: self.email.as_deref().map(Text::from),
            phone: self.phone.as_deref().map(Text::from),
            address: self.address.as_deref().map(Text::from),
            tin: self.tin.as_deref().map(Text::from),
            is_customer: self.is_customer,
            is_supplier: self.is_supplier,
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

    prop_compose! {
        fn contact()(
            id in any::<u128>(),
            name in text(),
            email in proptest::option::of(text()),
            phone in proptest::option::of(text()),
            address in proptest::option::of(text()),
            tin in proptest::option::of(text()),
            is_customer in any::<bool>(),
            is_supplier in any::<bool>(),
            seconds in 0_i64..253_402_300_799,
            nanos in 0_u32..1_000_000_000,
        ) -> Contact {
            Contact {
                id: Uuid::from_u128(id),
                name, email, phone, address, tin, is_customer, is_supplier,
                created_at: Timestamp::from(Utc.timestamp_opt(seconds, nanos).unwrap()),
            }
        }
    }

    proptest! {
        /// Pages are written from borrowed contacts; the document describes `Contact`.
        #[test]
        fn a_borrowed_contact_is_written_byte_for_byte_as_the_documented_contact(contact in contact()) {
            let mut written = Vec::new();
            contact.borrowed().write_json(&mut written).unwrap();
            prop_assert_eq!(written, serde_json::to_vec(&contact).unwrap());
        }
    }
}
