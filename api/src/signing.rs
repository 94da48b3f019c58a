//! The one way cursors and sync tokens are signed: HMAC-SHA256 over the scope a token is
//! bound to and the bytes it carries, under the cursor secret. Every new one is signed
//! with the current secret; one signed with a previous secret still opens, so that the
//! secret can be rotated without breaking the cursors and tokens clients hold.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

use crate::metric_names::PREVIOUS_SECRET_VERIFIED;

/// Bytes of a tag.
pub const TAG_LEN: usize = 32;

/// The secrets tags are made and checked with.
#[derive(Clone)]
pub struct SigningSecrets {
    current: SecretString,
    /// Retired secrets whose tags still verify, newest first, each with the counter of the
    /// tags it verified.
    previous: Vec<(SecretString, metrics::Counter)>,
}

/// What the fingerprint of a cursor secret is an HMAC of (under the secret).
const FINGERPRINT_LABEL: &[u8] = b"lectern cursor secret fingerprint";

impl SigningSecrets {
    /// The counters of the previous secrets start at 0: an alert on "still verifying"
    /// needs the series before the first tag.
    pub fn new(current: SecretString, previous: Vec<SecretString>) -> Self {
        let previous = previous
            .into_iter()
            .map(|secret| {
                let counter = metrics::counter!(PREVIOUS_SECRET_VERIFIED, "secret" => fingerprint(&secret));
                counter.increment(0);
                (secret, counter)
            })
            .collect();
        Self { current, previous }
    }

    /// Only `current`: nothing signed with another secret opens.
    pub fn only(current: SecretString) -> Self {
        Self::new(current, Vec::new())
    }

    /// The fingerprints of the current secret and of each previous one, for the log line
    /// that tells operators which series is which.
    pub fn fingerprints(&self) -> (String, Vec<String>) {
        (fingerprint(&self.current), self.previous.iter().map(|(secret, _)| fingerprint(secret)).collect())
    }

    /// The tag of `body` in the scope `fields` name, under the current secret.
    pub fn tag(&self, fields: &[&[u8]], body: &[u8]) -> [u8; TAG_LEN] {
        scoped_mac(&self.current, fields, body).finalize().into_bytes().into()
    }

    /// Whether `tag` is `body`'s in the scope `fields` name, under the current secret or a
    /// previous one (each compared in constant time). A previous secret that verifies one
    /// is counted: its counter not moving for the longest sync interval is what says it can
    /// be retired.
    pub fn verifies(&self, fields: &[&[u8]], body: &[u8], tag: &[u8]) -> bool {
        if scoped_mac(&self.current, fields, body).verify_slice(tag).is_ok() {
            return true;
        }
        let verified =
            self.previous.iter().find(|(secret, _)| scoped_mac(secret, fields, body).verify_slice(tag).is_ok());
        verified.inspect(|(_, counter)| counter.increment(1)).is_some()
    }
}

/// Names a cursor secret without revealing it: the first 8 hex digits of HMAC-SHA256 of a
/// fixed label under it (`printf %s 'lectern cursor secret fingerprint' | openssl dgst
/// -sha256 -hmac "$SECRET"` prints the same).
pub fn fingerprint(secret: &SecretString) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.expose_secret().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(FINGERPRINT_LABEL);
    mac.finalize().into_bytes()[..4].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// HMAC-SHA256 under `secret` over `fields`, each length-prefixed so that no two
/// different scopes share an encoding, then `body`. Cursors and sync tokens both sign
/// with it, each scope starting with a label of its own.
fn scoped_mac(secret: &SecretString, fields: &[&[u8]], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.expose_secret().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    for field in fields {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field);
    }
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> SecretString {
        SecretString::from(text.to_owned())
    }

    #[test]
    fn a_tag_of_a_previous_secret_verifies_and_new_tags_use_the_current_one() {
        let fields: [&[u8]; 1] = [b"scope"];
        let old = SigningSecrets::only(secret("old secret"));
        let rotated = SigningSecrets::new(secret("new secret"), vec![secret("old secret")]);
        let old_tag = old.tag(&fields, b"body");
        assert!(rotated.verifies(&fields, b"body", &old_tag), "a tag of the previous secret was refused");
        let new_tag = rotated.tag(&fields, b"body");
        assert_ne!(new_tag, old_tag, "a new tag was made with the previous secret");
        assert!(SigningSecrets::only(secret("new secret")).verifies(&fields, b"body", &new_tag));
        assert!(!SigningSecrets::only(secret("new secret")).verifies(&fields, b"body", &old_tag), "retired for good");
    }

    #[test]
    fn a_fingerprint_names_a_secret_in_eight_hex_digits_that_openssl_reproduces() {
        // printf %s 'lectern cursor secret fingerprint' | openssl dgst -sha256 -hmac 'old secret'
        let printed = fingerprint(&secret("old secret"));
        assert_eq!(printed.len(), 8);
        assert!(printed.bytes().all(|byte| byte.is_ascii_hexdigit()), "{printed}");
        assert_ne!(printed, fingerprint(&secret("new secret")));
        assert_eq!(printed, "fcd89b9e");
    }
}
