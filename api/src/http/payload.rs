//! Successful JSON bodies: bytes written by serde, documented by poem-openapi.
//!
//! poem-openapi's `Json` first turns a body into a `serde_json::Value` tree (a map and
//! a string allocation per field of every row), then writes that tree. Here a body is
//! written once, straight from the records, or assembled around a listing's `data`
//! array that was written once and cached. The schema in the OpenAPI document still
//! comes from the documented types' poem-openapi derivations, and tests hold the bytes
//! to what those types describe.

use std::marker::PhantomData;

use poem::{IntoResponse, Response};
use poem_openapi::payload::Payload;
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry};
use poem_openapi::types::Type;
use poem_openapi::ApiResponse;
use serde::Serialize;

use crate::error::ApiError;

/// A 200 JSON body, documented as `T`.
#[derive(Debug)]
pub struct JsonBody<T> {
    bytes: Vec<u8>,
    documented: PhantomData<fn() -> T>,
}

impl<T: Serialize> JsonBody<T> {
    /// `value` written by serde.
    pub fn new(value: &T) -> Result<Self, ApiError> {
        let mut bytes = Vec::with_capacity(512);
        write_json(value, &mut bytes)?;
        Ok(Self::assembled(bytes))
    }
}

/// Appends `value` as JSON. Our bodies are plain structs of strings, numbers and
/// booleans; failing here is a bug, which the envelope turns into the contract's 500.
pub fn write_json<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), ApiError> {
    serde_json::to_writer(out, value).map_err(|error| ApiError::Internal(Box::new(error)))
}

impl<T> JsonBody<T> {
    /// Bytes already written in `T`'s shape.
    pub fn assembled(bytes: Vec<u8>) -> Self {
        Self { bytes, documented: PhantomData }
    }
}

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = JSON;

    fn check_content_type(content_type: &str) -> bool {
        content_type.starts_with("application/json")
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Type> IntoResponse for JsonBody<T> {
    fn into_response(self) -> Response {
        json_response(self.bytes)
    }
}

/// A 200 carrying `body`, JSON already written.
pub fn json_response(body: Vec<u8>) -> Response {
    Response::builder().content_type(JSON).body(body)
}

const JSON: &str = "application/json; charset=utf-8";

/// What a 200 carrying this body means, in the document's words.
pub trait Described {
    const DESCRIPTION: &'static str;
}

impl<T: Type + Described> ApiResponse for JsonBody<T> {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: T::DESCRIPTION,
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType { content_type: Self::CONTENT_TYPE, schema: Self::schema_ref() }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

#[cfg(test)]
mod tests {
    use lectern_schema::events::ItemType;
    use lectern_schema::money::{Amount, Currency, Money};
    use lectern_schema::{Contact, Item, Timestamp};
    use poem_openapi::types::ToJSON;
    use uuid::Uuid;

    use crate::http::contacts::{ContactEnvelope, ContactList};
    use crate::http::items::{ItemEnvelope, ItemList};
    use crate::http::request_id::RequestId;
    use crate::listing::page::PageInfo;

    fn contact(name: &str, email: Option<&str>) -> Contact {
        Contact {
            id: Uuid::from_u128(7),
            name: name.to_owned(),
            email: email.map(str::to_owned),
            phone: None,
            address: Some("Hauptstr. 1, \"Berlin\"\n".to_owned()),
            tin: Some("DE123456789".to_owned()),
            is_customer: true,
            is_supplier: false,
            created_at: Timestamp::parse("2025-02-03T08:00:00.1Z").unwrap(),
        }
    }

    fn item(sale: Option<(&str, &str)>) -> Item {
        Item {
            id: Uuid::from_u128(9),
            name: "Consulting hour ☕".to_owned(),
            sku: None,
            description: Some("Per started hour".to_owned()),
            kind: ItemType::Service,
            unit: Some("hour".to_owned()),
            sale_price: sale.map(|(amount, currency)| Money {
                amount: Amount::parse(amount).unwrap(),
                currency: Currency::parse(currency).unwrap(),
            }),
            purchase_price: None,
            created_at: Timestamp::parse("2025-03-01T08:00:00Z").unwrap(),
        }
    }

    fn page(next: Option<&str>) -> PageInfo {
        PageInfo { has_more: next.is_some(), next_cursor: next.map(str::to_owned) }
    }

    /// The document is derived from the poem-openapi types; the bytes come from serde.
    /// They must be the same JSON, or the served body would drift from the contract.
    #[test]
    fn serde_bodies_are_exactly_what_the_documented_types_describe() {
        let request_id = RequestId::from_client("req-1").unwrap();
        let contacts = ContactList {
            data: vec![contact("Acme GmbH", Some("a@acme.example")), contact("Bäckerei", None)],
            page: page(Some("AQAA")),
            request_id: request_id.clone(),
        };
        assert_eq!(serde_json::to_value(&contacts).unwrap(), contacts.to_json().unwrap());
        let one = ContactEnvelope { data: contact("Acme", None), request_id: request_id.clone() };
        assert_eq!(serde_json::to_value(&one).unwrap(), one.to_json().unwrap());
        let items = ItemList {
            data: vec![item(Some(("-12345678901234.5678", "JPY"))), item(None)],
            page: page(None),
            request_id: request_id.clone(),
        };
        assert_eq!(serde_json::to_value(&items).unwrap(), items.to_json().unwrap());
        let one = ItemEnvelope { data: item(Some(("120.00", "EUR"))), request_id };
        assert_eq!(serde_json::to_value(&one).unwrap(), one.to_json().unwrap());
    }
}
