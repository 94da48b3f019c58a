//! Signing secrets: made, shown once as `whsec_…`, sealed at rest, and used to sign
//! deliveries as Standard Webhooks 1.0 says (`webhook-signature: v1,<base64 HMAC-SHA256
//! of "<id>.<timestamp>.<body>">`, several space-separated while a rotation overlaps).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use secrecy::{ExposeSecret, SecretBox, SecretString};
use sha2::Sha256;
use uuid::Uuid;

use crate::keys::{Pepper, Peppers};

/// What the secret's text starts with, as Standard Webhooks names it.
const PREFIX: &str = "whsec_";
/// Random bytes of a secret (the standard asks for 24 to 64).
const SECRET_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// What the sealing key is derived from the pepper under (never used for anything else).
const SEALING_LABEL: &str = "lectern webhook signing secrets, sealed at rest, v1";

/// One endpoint's signing secret.
pub struct SigningSecret(SecretBox<Vec<u8>>);

/// Why a sealed secret could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(
        "the endpoint's signing secret was sealed under a key pepper that is neither LECTERN_KEY_PEPPER nor listed \
         in LECTERN_PREVIOUS_KEY_PEPPERS"
    )]
    UnknownPepper,
    #[error("the endpoint's sealed signing secret does not open (altered, or moved from another endpoint)")]
    Corrupt,
}

impl SigningSecret {
    /// A new random secret.
    pub fn generate() -> Self {
        let mut bytes = vec![0; SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(SecretBox::new(Box::new(bytes)))
    }

    /// The text given to the integrator once (`whsec_` and base64).
    pub fn reveal(&self) -> SecretString {
        SecretString::from(format!("{PREFIX}{}", STANDARD.encode(self.0.expose_secret())))
    }

    /// `v1,<signature>` of one delivery.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.0.expose_secret())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    /// The secret sealed for `endpoint` under `pepper`: nonce, then ciphertext and tag. The
    /// endpoint's id is authenticated with it, so a sealed secret copied to another
    /// endpoint's row does not open.
    pub fn seal(&self, pepper: &Pepper, endpoint: Uuid) -> Vec<u8> {
        let cipher = ChaCha20Poly1305::new(&pepper.derive(SEALING_LABEL).into());
        let mut nonce = [0; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let payload = Payload { msg: self.0.expose_secret().as_slice(), aad: endpoint.as_bytes() };
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), payload)
            .unwrap_or_else(|_| unreachable!("sealing 32 bytes cannot exceed the cipher's limits"));
        [nonce.as_slice(), &sealed].concat()
    }

    /// Opens what [`Self::seal`] made, with the pepper whose fingerprint is recorded.
    pub fn open(sealed: &[u8], fingerprint: &[u8], peppers: &Peppers, endpoint: Uuid) -> Result<Self, SealError> {
        let pepper =
            peppers.all().find(|pepper| pepper.fingerprint() == fingerprint).ok_or(SealError::UnknownPepper)?;
        let (nonce, ciphertext) = sealed.split_at_checked(NONCE_BYTES).ok_or(SealError::Corrupt)?;
        let cipher = ChaCha20Poly1305::new(&pepper.derive(SEALING_LABEL).into());
        let opened = cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: endpoint.as_bytes() })
            .map_err(|_| SealError::Corrupt)?;
        Ok(Self(SecretBox::new(Box::new(opened))))
    }
}

/// The `webhook-signature` header of a delivery signed with each of `secrets`.
pub fn signature_header<'a>(
    secrets: impl IntoIterator<Item = &'a SigningSecret>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets.into_iter().map(|secret| secret.sign(id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pepper(text: &str) -> Pepper {
        Pepper::new(SecretString::from(text.to_owned()))
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_endpoint_under_its_pepper() {
        let secret = SigningSecret::generate();
        let (endpoint, old, new) = (Uuid::new_v4(), pepper("old pepper"), pepper("new pepper"));
        let sealed = secret.seal(&old, endpoint);
        assert!(
            !sealed.windows(SECRET_BYTES).any(|window| window == secret.0.expose_secret().as_slice()),
            "sealed in clear"
        );
        let rotated = Peppers::new(new.clone(), vec![old.clone()]);
        let opened = SigningSecret::open(&sealed, &old.fingerprint(), &rotated, endpoint).expect("opens");
        assert_eq!(opened.sign("msg_1", 1, b"{}"), secret.sign("msg_1", 1, b"{}"));
        assert!(matches!(
            SigningSecret::open(&sealed, &old.fingerprint(), &Peppers::only(new), endpoint),
            Err(SealError::UnknownPepper)
        ));
        assert!(matches!(
            SigningSecret::open(&sealed, &old.fingerprint(), &rotated, Uuid::new_v4()),
            Err(SealError::Corrupt)
        ));
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_id_timestamp_and_body_under_the_decoded_secret() {
        // Standard Webhooks' own example: secret, id, timestamp, body and signature.
        let bytes = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("base64");
        let secret = SigningSecret(SecretBox::new(Box::new(bytes)));
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, b"{\"test\": 2432232314}"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let revealed = secret.reveal();
        assert_eq!(revealed.expose_secret(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    }
}
