//! The one way cursors and sync tokens are signed: HMAC-SHA256 under the cursor secret,
//! over the scope a token is bound to and the bytes it carries.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// HMAC-SHA256 under `secret` over `fields`, each length-prefixed so that no two
/// different scopes share an encoding, then `body`. Cursors and sync tokens both sign
/// with it, each scope starting with a label of its own.
pub fn scoped_mac(secret: &SecretString, fields: &[&[u8]], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.expose_secret().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    for field in fields {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field);
    }
    mac.update(body);
    mac
}
