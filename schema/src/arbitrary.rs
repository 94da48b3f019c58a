//! Test inputs shared by the record types' property tests.

use proptest::prelude::*;

/// Any Unicode text, weighted towards what JSON must escape.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}\u{2029}a-zé☕]{0,12}"]
}
