//! The records' JSON, written by hand into a response buffer.
//!
//! A page repeats one record shape up to a hundred times. Through serde, each string
//! was escaped a byte at a time and each punctuation mark, key and fragment was a
//! `Vec` append of its own: a callgrind profile of a deep page put a third of the API's
//! instructions there. Here the keys and punctuation around each value are one
//! constant, and strings are scanned eight bytes at a time.
//!
//! The output is serde_json's, byte for byte, for the documented types (property tests
//! in `contact`, `item` and below): the same escapes, `null` for an absent value, and
//! the fields in the documented order.

use std::fmt;
use std::str::Utf8Error;

use uuid::Uuid;

/// `{"key":value,…}` for a record: each key with its punctuation is one constant.
macro_rules! write_object {
    ($out:expr, $first_key:literal => $first:expr $(, $key:literal => $value:expr)* $(,)?) => {{
        let out: &mut Vec<u8> = $out;
        out.extend_from_slice(concat!("{\"", $first_key, "\":").as_bytes());
        $crate::json::WriteJson::write_json(&$first, out)?;
        $(
            out.extend_from_slice(concat!(",\"", $key, "\":").as_bytes());
            $crate::json::WriteJson::write_json(&$value, out)?;
        )*
        out.push(b'}');
        Ok(())
    }};
}
pub(crate) use write_object;

/// A value that writes its own JSON. Only [`Text`] can fail: when its bytes turn out
/// not to be UTF-8, nothing of it is written.
pub trait WriteJson {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error>;
}

/// Text as its source sent it, checked to be UTF-8 only when it is written or read.
///
/// PostgreSQL sends text in the database's encoding (UTF-8 for Lectern's), and sqlx
/// checked every field of every row to make it a `&str`: a tenth of a deep page's
/// instructions, mostly per-call overhead on short fields. Writing it scans every byte
/// anyway, so text that is all ASCII is known valid without a second pass.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text<'a>(&'a [u8]);

impl<'a> Text<'a> {
    /// Bytes expected to be UTF-8; checked when used.
    pub fn from_bytes(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    pub fn as_str(&self) -> Result<&'a str, Utf8Error> {
        std::str::from_utf8(self.0)
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Self(text.as_bytes())
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(self.0), f)
    }
}

impl WriteJson for Text<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        let start = out.len();
        if write_escaped(out, self.0) {
            if let Err(error) = std::str::from_utf8(self.0) {
                out.truncate(start);
                return Err(error);
            }
        }
        Ok(())
    }
}

impl WriteJson for &str {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        write_str(out, self);
        Ok(())
    }
}

impl WriteJson for bool {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        out.extend_from_slice(if *self { b"true" } else { b"false" });
        Ok(())
    }
}

impl WriteJson for Uuid {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        let mut buffer = Uuid::encode_buffer();
        out.push(b'"');
        out.extend_from_slice(self.hyphenated().encode_lower(&mut buffer).as_bytes());
        out.push(b'"');
        Ok(())
    }
}

impl<T: WriteJson> WriteJson for Option<T> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), Utf8Error> {
        match self {
            Some(value) => value.write_json(out),
            None => {
                out.extend_from_slice(b"null");
                Ok(())
            }
        }
    }
}

/// `text` as a JSON string, escaped as serde_json escapes it: `"` and `\` with a
/// backslash, the control characters with their short escape or `\u00XX`, everything
/// else (U+2028 included) as it is.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    write_escaped(out, text.as_bytes());
}

/// [`write_str`] for bytes; says whether any byte was outside ASCII (only then can
/// they be anything but UTF-8).
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    let mut beyond_ascii = 0_u64;
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut clean_from, mut at) = (0, 0);
    while at < bytes.len() {
        // Near the end, the text's last eight bytes: those before `at` among them are
        // already written or escaped, so a clean word ends the scan, and one that is not
        // clean only sends the rest down the byte-at-a-time path.
        let word_from = if at + 8 <= bytes.len() { Some(at) } else { bytes.len().checked_sub(8) };
        let word = word_from.and_then(|from| bytes.get(from..from + 8)).and_then(|word| <[u8; 8]>::try_from(word).ok());
        if let Some(word) = word.map(u64::from_le_bytes) {
            beyond_ascii |= word;
            if !needs_escape(word) {
                at = (at + 8).min(bytes.len());
                continue;
            }
        }
        let byte = bytes[at];
        beyond_ascii |= u64::from(byte);
        if let Some(escape) = escape(byte) {
            out.extend_from_slice(&bytes[clean_from..at]);
            out.extend_from_slice(escape.as_bytes());
            clean_from = at + 1;
        } else if byte < 0x20 {
            out.extend_from_slice(&bytes[clean_from..at]);
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
            clean_from = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&bytes[clean_from..]);
    out.push(b'"');
    beyond_ascii & HIGHS != 0
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes is below 0x20, `"` or `\`. Bytes of multi-byte
/// UTF-8 sequences (0x80 and above) never match.
fn needs_escape(word: u64) -> bool {
    // A byte below n (n ≤ 0x80) sets its high bit in `(w - n·ONES) & !w & HIGHS`; a
    // zero byte of `w ^ c·ONES` is a byte equal to c.
    let below = |word: u64, n: u64| word.wrapping_sub(n * ONES) & !word & HIGHS != 0;
    below(word, 0x20) || below(word ^ (u64::from(b'"') * ONES), 1) || below(word ^ (u64::from(b'\\') * ONES), 1)
}

/// The short escape serde_json writes for `byte`, if it has one.
fn escape(byte: u8) -> Option<&'static str> {
    Some(match byte {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        0x08 => "\\b",
        0x0c => "\\f",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::arbitrary::text;

    /// Written both ways: as a `str`, and as bytes through [`Text`].
    fn written(text: &str) -> Vec<u8> {
        let (mut as_str, mut as_text) = (Vec::new(), Vec::new());
        write_str(&mut as_str, text);
        Text::from_bytes(text.as_bytes()).write_json(&mut as_text).unwrap();
        assert_eq!(as_str, as_text);
        as_str
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_and_nothing_of_it_is_written() {
        for bytes in [&b"caf\xe9"[..], b"\xff", b"12345678\xc3(", b"ok \xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80"] {
            let mut out = b"[".to_vec();
            assert!(Text::from_bytes(bytes).write_json(&mut out).is_err(), "{bytes:?}");
            assert_eq!(out, b"[");
            assert!(Text::from_bytes(bytes).as_str().is_err());
        }
    }

    #[test]
    fn every_character_that_needs_escaping_is_escaped_at_every_offset_of_a_word() {
        let specials: Vec<char> = (0..0x20_u8).map(char::from).chain(['"', '\\', '\u{7f}', '\u{2028}', 'é']).collect();
        for special in specials {
            for offset in 0..17 {
                let text = format!("{}{special}{}", "a".repeat(offset), "b".repeat(17 - offset));
                assert_eq!(written(&text), serde_json::to_vec(&text).unwrap(), "{text:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in text(), repeat in 1_usize..5) {
            let text = text.repeat(repeat);
            prop_assert_eq!(written(&text), serde_json::to_vec(&text).unwrap());
        }

        #[test]
        fn uuids_options_and_booleans_are_written_as_serde_json_writes_them(
            id in any::<u128>(), flag in any::<bool>(), present in any::<bool>()
        ) {
            let (id, text) = (Uuid::from_u128(id), present.then_some("x"));
            let mut out = Vec::new();
            id.write_json(&mut out).unwrap();
            flag.write_json(&mut out).unwrap();
            text.write_json(&mut out).unwrap();
            let mut expected = serde_json::to_vec(&id).unwrap();
            expected.extend(serde_json::to_vec(&flag).unwrap());
            expected.extend(serde_json::to_vec(&text).unwrap());
            prop_assert_eq!(out, expected);
        }
    }
}
