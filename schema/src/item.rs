//! The Item record: a product or service a workspace sells or buys.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::events::ItemType;
use crate::money::Money;
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
