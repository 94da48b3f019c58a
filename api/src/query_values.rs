//! How a query value becomes a typed parameter that both checks itself and describes
//! itself to the OpenAPI document: every feature's parameters are declared this way, and
//! the strict query gate checks them with the same parsers.

/// Implements poem-openapi's parameter traits for a `FromStr<Err = String>` type.
macro_rules! query_param_type {
    ($ty:ty, $name:expr, $schema:expr, $to_json:expr) => {
        impl poem_openapi::types::Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }

            fn schema_ref() -> poem_openapi::registry::MetaSchemaRef {
                poem_openapi::registry::MetaSchemaRef::Inline(Box::new($schema))
            }

            fn as_raw_value(&self) -> Option<&Self::RawValueType> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }

        impl poem_openapi::types::ParseFromParameter for $ty {
            fn parse_from_parameter(value: &str) -> poem_openapi::types::ParseResult<Self> {
                value.parse::<Self>().map_err(poem_openapi::types::ParseError::custom)
            }
        }

        impl poem_openapi::types::ToJSON for $ty {
            fn to_json(&self) -> Option<serde_json::Value> {
                // Through a fn pointer: calling the closure where it is written is
                // clippy's redundant_closure_call, let pass today only because this is
                // a macro expansion.
                let to_json: fn(&Self) -> serde_json::Value = $to_json;
                Some(to_json(self))
            }
        }
    };
}
pub(crate) use query_param_type;

/// Declares a closed set of query values (`type`, `sort`) with its wire names; the
/// first variant is the default.
macro_rules! query_enum {
    ($(#[$meta:meta])* $name:ident { $first:ident = $first_text:literal $(, $variant:ident = $text:literal)* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            #[default]
            $first,
            $($variant,)*
        }

        impl $name {
            pub const VALUES: &'static [&'static str] = &[$first_text $(, $text)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    Self::$first => $first_text,
                    $(Self::$variant => $text,)*
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                match text {
                    $first_text => Ok(Self::$first),
                    $($text => Ok(Self::$variant),)*
                    _ => Err(format!("must be one of: {}", Self::VALUES.join(", "))),
                }
            }
        }

        $crate::query_values::query_param_type!(
            $name,
            stringify!($name),
            {
                let mut schema = poem_openapi::registry::MetaSchema::new("string");
                schema.enum_items = Self::VALUES.iter().map(|v| serde_json::Value::String((*v).to_owned())).collect();
                schema
            },
            |value: &$name| serde_json::Value::String(value.as_str().to_owned())
        );
    };
}
pub(crate) use query_enum;

/// A whole decimal number from `min` to `max`: digits only, no sign, no spaces, no
/// fraction, no exponent.
pub fn whole_number(text: &str, min: u8, max: u8) -> Result<u8, String> {
    let problem = || format!("must be a whole number from {min} to {max}");
    if text.is_empty() || text.len() > 3 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(problem());
    }
    match text.parse::<u8>() {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        _ => Err(problem()),
    }
}
