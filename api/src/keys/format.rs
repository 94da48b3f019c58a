//! The key text, its parts, and the peppered hash that is all the database keeps.

use std::fmt;
use std::str::FromStr;

use hmac::{Hmac, Mac};
use rand::distributions::{Alphanumeric, DistString};
use rand::rngs::OsRng;
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// Length of the public key id: 16 base62 characters (~95 bits), unique in practice.
const KEY_ID_LEN: usize = 16;
/// Length of the secret: 43 base62 characters carry 256.03 bits.
const SECRET_LEN: usize = 43;
/// Bytes of a pepper's fingerprint: enough that two peppers never share one in practice.
pub const FINGERPRINT_LEN: usize = 16;
/// What a pepper's fingerprint is the HMAC of. It holds spaces, so no key's secret (base62
/// only) is ever this text: a fingerprint is never a key's hash, nor its prefix.
const FINGERPRINT_LABEL: &str = "lectern api key pepper fingerprint v1";

/// Which deployment a key is for; a deployment serves exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Environment {
    Live,
    Test,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Test => "test",
        }
    }
}

impl FromStr for Environment {
    type Err = KeyError;
    fn from_str(text: &str) -> Result<Self, KeyError> {
        match text {
            "live" => Ok(Self::Live),
            "test" => Ok(Self::Test),
            _ => Err(KeyError::Malformed),
        }
    }
}

/// A permission a key may carry; each route requires one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Scope {
    #[value(name = "contacts:read")]
    ContactsRead,
    #[value(name = "items:read")]
    ItemsRead,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContactsRead => "contacts:read",
            Self::ItemsRead => "items:read",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "contacts:read" => Some(Self::ContactsRead),
            "items:read" => Some(Self::ItemsRead),
            _ => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a presented key cannot even be looked up.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the API key is not in the form lk_<live|test>_<key id>_<secret>")]
    Malformed,
}

/// A key split into its parts. The secret stays wrapped so it cannot be logged.
pub struct ParsedKey {
    pub environment: Environment,
    pub key_id: String,
    secret: SecretString,
}

impl fmt::Debug for ParsedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParsedKey")
            .field("environment", &self.environment)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

fn is_base62(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl ParsedKey {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let rest = text.strip_prefix("lk_").ok_or(KeyError::Malformed)?;
        let (environment, rest) = rest.split_once('_').ok_or(KeyError::Malformed)?;
        let (key_id, secret) = rest.split_once('_').ok_or(KeyError::Malformed)?;
        if key_id.len() != KEY_ID_LEN || secret.len() != SECRET_LEN || !is_base62(key_id) || !is_base62(secret) {
            return Err(KeyError::Malformed);
        }
        Ok(Self {
            environment: environment.parse()?,
            key_id: key_id.to_owned(),
            secret: SecretString::from(secret.to_owned()),
        })
    }

    pub fn secret_hmac(&self, pepper: &Pepper) -> [u8; 32] {
        pepper.hmac(self.secret.expose_secret())
    }
}

/// A newly made key: shown once, then only its hash exists.
pub struct IssuedKey {
    pub key_id: String,
    pub environment: Environment,
    pub key: SecretString,
    pub secret_hmac: [u8; 32],
    /// The fingerprint of the pepper `secret_hmac` was made under.
    pub pepper_fingerprint: [u8; FINGERPRINT_LEN],
}

impl IssuedKey {
    pub fn generate(environment: Environment, pepper: &Pepper) -> Self {
        let key_id = Alphanumeric.sample_string(&mut OsRng, KEY_ID_LEN);
        let secret = Alphanumeric.sample_string(&mut OsRng, SECRET_LEN);
        let secret_hmac = pepper.hmac(&secret);
        let key = SecretString::from(format!("lk_{}_{key_id}_{secret}", environment.as_str()));
        Self { key_id, environment, key, secret_hmac, pepper_fingerprint: pepper.fingerprint() }
    }
}

/// The server-side secret under which key secrets are hashed (its `Debug` shows no byte).
#[derive(Clone, Debug)]
pub struct Pepper(SecretString);

impl Pepper {
    pub fn new(secret: SecretString) -> Self {
        Self(secret)
    }

    fn hmac(&self, secret: &str) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.0.expose_secret().as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(secret.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A key for another purpose, named by `label`, derived from this pepper (HMAC-SHA256
    /// of the label): one secret for the operator to keep, and no derived key reveals it.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        self.hmac(label)
    }

    /// Compares in constant time, so response timing reveals nothing about the hash.
    pub fn verify(&self, key: &ParsedKey, stored: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        key.secret_hmac(self).ct_eq(stored).into()
    }

    /// Names this pepper without revealing it: the start of HMAC-SHA256 of a fixed label
    /// under it, stored beside each key's hash so that `keys list` can tell which pepper
    /// a key depends on. One-way like the key hashes; with a pepper of 32 random bytes (as
    /// production requires) it cannot be guessed back from it either.
    pub fn fingerprint(&self) -> [u8; FINGERPRINT_LEN] {
        let mac = self.hmac(FINGERPRINT_LABEL);
        let mut fingerprint = [0; FINGERPRINT_LEN];
        fingerprint.copy_from_slice(&mac[..FINGERPRINT_LEN]);
        fingerprint
    }
}

/// Which of the [`Peppers`] a stored hash was made under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Made {
    Current,
    Previous,
}

/// Which pepper a stored key depends on, as far as its recorded fingerprint tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PepperDependency {
    /// Hashed under the current pepper.
    Current,
    /// Hashed under one of the listed previous peppers: re-hashed under the current one
    /// at its next use, refused once that pepper is unlisted.
    Previous,
    /// No fingerprint recorded (the key was made before fingerprints were, and has not
    /// been used since): it may depend on any pepper.
    Unrecorded,
    /// Hashed under a pepper neither current nor listed: this key is refused.
    Unknown,
}

/// The pepper every new hash is made under, and the retired ones whose hashes still
/// verify, so the pepper can be rotated without refusing the keys hashed under the old one.
#[derive(Clone, Debug)]
pub struct Peppers {
    current: Pepper,
    /// Retired peppers whose hashes still verify.
    previous: Vec<Pepper>,
}

impl Peppers {
    pub fn new(current: Pepper, previous: Vec<Pepper>) -> Self {
        Self { current, previous }
    }

    /// Only `current`: a key hashed under any other pepper is refused.
    pub fn only(current: Pepper) -> Self {
        Self::new(current, Vec::new())
    }

    /// The pepper new hashes are made under.
    pub fn current(&self) -> &Pepper {
        &self.current
    }

    /// Which pepper `stored` is `key`'s hash under, if any: the current one first, each
    /// compared in constant time.
    pub fn verify(&self, key: &ParsedKey, stored: &[u8]) -> Option<Made> {
        if self.current.verify(key, stored) {
            Some(Made::Current)
        } else if self.previous.iter().any(|pepper| pepper.verify(key, stored)) {
            Some(Made::Previous)
        } else {
            None
        }
    }

    /// The current pepper and each listed previous one, current first.
    pub fn all(&self) -> impl Iterator<Item = &Pepper> {
        std::iter::once(&self.current).chain(&self.previous)
    }

    /// Which pepper a key whose hash carries `fingerprint` depends on.
    pub fn dependency(&self, fingerprint: Option<&[u8]>) -> PepperDependency {
        match fingerprint {
            None => PepperDependency::Unrecorded,
            Some(fingerprint) if fingerprint == self.current.fingerprint() => PepperDependency::Current,
            Some(fingerprint) if self.previous.iter().any(|pepper| fingerprint == pepper.fingerprint()) => {
                PepperDependency::Previous
            }
            Some(_) => PepperDependency::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pepper() -> Pepper {
        Pepper::new(SecretString::from("test pepper".to_owned()))
    }

    #[test]
    fn issued_keys_have_the_documented_format() {
        let issued = IssuedKey::generate(Environment::Test, &pepper());
        let text = issued.key.expose_secret();
        let parts: Vec<&str> = text.split('_').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!((parts[0], parts[1]), ("lk", "test"));
        assert_eq!(parts[2], issued.key_id);
        assert!(parts[3].len() >= 43 && is_base62(parts[3]));
    }

    #[test]
    fn a_key_verifies_against_its_own_hash_only() {
        let pepper = pepper();
        let issued = IssuedKey::generate(Environment::Live, &pepper);
        let parsed = ParsedKey::parse(issued.key.expose_secret()).unwrap();
        assert!(pepper.verify(&parsed, &issued.secret_hmac));
        let other = IssuedKey::generate(Environment::Live, &pepper);
        assert!(!pepper.verify(&parsed, &other.secret_hmac));
        let other_pepper = Pepper::new(SecretString::from("another".to_owned()));
        assert!(!other_pepper.verify(&parsed, &issued.secret_hmac));
    }

    #[test]
    fn a_hash_under_a_previous_pepper_verifies_as_previous_until_it_is_unlisted() {
        let old = Pepper::new(SecretString::from("old pepper".to_owned()));
        let new = Pepper::new(SecretString::from("new pepper".to_owned()));
        let issued = IssuedKey::generate(Environment::Live, &old);
        let parsed = ParsedKey::parse(issued.key.expose_secret()).unwrap();
        let rotating = Peppers::new(new.clone(), vec![old.clone()]);
        assert_eq!(rotating.verify(&parsed, &issued.secret_hmac), Some(Made::Previous));
        assert_eq!(rotating.verify(&parsed, &parsed.secret_hmac(&new)), Some(Made::Current));
        assert_eq!(Peppers::only(new.clone()).verify(&parsed, &issued.secret_hmac), None, "retired for good");
        let other = IssuedKey::generate(Environment::Live, &old);
        assert_eq!(rotating.verify(&parsed, &other.secret_hmac), None, "another key's hash");
    }

    #[test]
    fn a_fingerprint_names_its_pepper_and_is_no_key_hash() {
        let old = Pepper::new(SecretString::from("old pepper".to_owned()));
        let new = Pepper::new(SecretString::from("new pepper".to_owned()));
        let issued = IssuedKey::generate(Environment::Live, &old);
        assert_eq!(issued.pepper_fingerprint, old.fingerprint());
        assert_ne!(old.fingerprint(), new.fingerprint());
        assert_ne!(issued.pepper_fingerprint[..], issued.secret_hmac[..FINGERPRINT_LEN]);
        let peppers = Peppers::new(new.clone(), vec![old.clone()]);
        assert_eq!(peppers.dependency(Some(&new.fingerprint())), PepperDependency::Current);
        assert_eq!(peppers.dependency(Some(&old.fingerprint())), PepperDependency::Previous);
        assert_eq!(peppers.dependency(None), PepperDependency::Unrecorded);
        assert_eq!(Peppers::only(new).dependency(Some(&old.fingerprint())), PepperDependency::Unknown);
    }

    #[test]
    fn malformed_keys_are_refused() {
        let good = IssuedKey::generate(Environment::Live, &pepper());
        let good = good.key.expose_secret().to_owned();
        let bad = [
            String::new(),
            "lk_live".to_owned(),
            good.replacen("lk_", "pk_", 1),
            good.replacen("_live_", "_prod_", 1),
            format!("{good}x"),
            good[..good.len() - 1].to_owned(),
            good.replacen("lk_live_", "lk_live_-", 1),
            format!("{}é", &good[..good.len() - 2]),
        ];
        for text in bad {
            assert_eq!(ParsedKey::parse(&text).unwrap_err(), KeyError::Malformed, "{text:?}");
        }
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let issued = IssuedKey::generate(Environment::Live, &pepper());
        let parsed = ParsedKey::parse(issued.key.expose_secret()).unwrap();
        let secret = issued.key.expose_secret().rsplit('_').next().unwrap().to_owned();
        assert!(!format!("{parsed:?}").contains(&secret));
    }
}
