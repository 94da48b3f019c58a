//! The Contact record: a customer or supplier of a workspace.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
