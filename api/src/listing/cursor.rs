//! Opaque, signed, expiring cursors.
//!
//! A cursor carries the position after which the next page starts. Its HMAC-SHA256 tag
//! also covers the resource, the workspace, the filter and the sort of the request that
//! produced it, none of which travel in the cursor: a cursor replayed in another
//! workspace, with another filter or sort, or altered in any byte, fails verification.
//!
//! It also carries the WAL position its page was read at, so that the next page is read
//! where at least that much is replayed (see `reads::replicas`). Cursors of the first
//! format, without it, still open, as read at the start of the WAL.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::params::SortKey;
use super::request::Position;
use crate::signing::{SigningSecrets, TAG_LEN};

use crate::reads::replicas::WalPosition;

const VERSION: u8 = 2;
/// The first format's version: no read position.
const UNPOSITIONED_VERSION: u8 = 1;
/// version, issued-at seconds, sort, id.
const UNPOSITIONED_HEADER_LEN: usize = 1 + 8 + 1 + 16;
/// The same, then the read position.
const HEADER_LEN: usize = UNPOSITIONED_HEADER_LEN + 8;

/// What a cursor is bound to; everything here must be equal when it comes back.
#[derive(Debug)]
pub struct CursorScope<'a> {
    pub resource: &'static str,
    pub workspace_id: Uuid,
    pub kind: &'static str,
    pub search: Option<&'a str>,
    pub sort: SortKey,
}

/// Why a cursor was refused; each message tells the client to start over.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("is not a cursor issued by this API; start a new traversal without `cursor`")]
    Malformed,
    #[error(
        "does not belong to this query (cursors are bound to the key's workspace, the search, \
         the type and the sort, and cannot be altered), or was signed with a secret this server \
         has retired; start a new traversal without `cursor`"
    )]
    Mismatch,
    #[error("has expired; start a new traversal without `cursor`")]
    Expired,
}

/// Issues and opens cursors under the server's cursor secret.
#[derive(Clone)]
pub struct CursorSigner {
    secrets: SigningSecrets,
    lifetime: Duration,
}

impl CursorSigner {
    pub fn new(secrets: SigningSecrets, lifetime: Duration) -> Self {
        Self { secrets, lifetime }
    }

    /// A cursor after `position`, read at the start of the WAL (no replica is too old for it).
    pub fn issue(&self, scope: &CursorScope<'_>, position: &Position) -> String {
        self.issue_read_at(scope, position, 0)
    }

    /// A cursor after `position`, on a page read at `read_at` (0: unknown, and then in the
    /// first format).
    pub fn issue_read_at(&self, scope: &CursorScope<'_>, position: &Position, read_at: WalPosition) -> String {
        self.issue_at(scope, position, read_at, Utc::now())
    }

    fn issue_at(
        &self,
        scope: &CursorScope<'_>,
        position: &Position,
        read_at: WalPosition,
        now: DateTime<Utc>,
    ) -> String {
        let mut bytes = Vec::with_capacity(HEADER_LEN + 32 + TAG_LEN);
        // Without a read position, the first format: the release before it reads that.
        bytes.push(if read_at == 0 { UNPOSITIONED_VERSION } else { VERSION });
        bytes.extend_from_slice(&now.timestamp().to_be_bytes());
        let (sort, id) = match position {
            Position::CreatedAt { id, .. } => (0, id),
            Position::Name { id, .. } => (1, id),
        };
        bytes.push(sort);
        bytes.extend_from_slice(id.as_bytes());
        if read_at != 0 {
            bytes.extend_from_slice(&read_at.to_be_bytes());
        }
        match position {
            Position::CreatedAt { at, .. } => bytes.extend_from_slice(&at.timestamp_micros().to_be_bytes()),
            Position::Name { name, .. } => bytes.extend_from_slice(name.as_bytes()),
        }
        let tag = self.tag(scope, &bytes);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub fn open(&self, token: &str, scope: &CursorScope<'_>) -> Result<Position, CursorError> {
        self.open_read_at(token, scope).map(|(position, _)| position)
    }

    /// The position `token` carries and the WAL position its page was read at.
    pub fn open_read_at(&self, token: &str, scope: &CursorScope<'_>) -> Result<(Position, WalPosition), CursorError> {
        self.open_at(token, scope, Utc::now())
    }

    fn open_at(
        &self,
        token: &str,
        scope: &CursorScope<'_>,
        now: DateTime<Utc>,
    ) -> Result<(Position, WalPosition), CursorError> {
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| CursorError::Malformed)?;
        let header_len = match bytes.first() {
            Some(&VERSION) => HEADER_LEN,
            Some(&UNPOSITIONED_VERSION) => UNPOSITIONED_HEADER_LEN,
            _ => return Err(CursorError::Malformed),
        };
        if bytes.len() < header_len + TAG_LEN {
            return Err(CursorError::Malformed);
        }
        let (body, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if !self.secrets.verifies(&scope_fields(scope), body, tag) {
            return Err(CursorError::Mismatch);
        }

        // Authentic from here on: the bytes are exactly what this server wrote.
        let issued = i64::from_be_bytes(body[1..9].try_into().map_err(|_| CursorError::Malformed)?);
        let lifetime = i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX);
        if now.timestamp().saturating_sub(issued) > lifetime {
            return Err(CursorError::Expired);
        }
        let id = Uuid::from_slice(&body[10..26]).map_err(|_| CursorError::Malformed)?;
        let read_at = match header_len {
            HEADER_LEN => i64::from_be_bytes(body[26..34].try_into().map_err(|_| CursorError::Malformed)?),
            _ => 0,
        };
        let key = &body[header_len..];
        let position = match (body[9], scope.sort) {
            (0, SortKey::CreatedAt) => {
                let micros = i64::from_be_bytes(key.try_into().map_err(|_| CursorError::Malformed)?);
                let at = DateTime::from_timestamp_micros(micros).ok_or(CursorError::Malformed)?;
                // No record has such an instant; PostgreSQL would refuse to compare it.
                if !lectern_schema::Timestamp::renderable(&at) {
                    return Err(CursorError::Malformed);
                }
                Position::CreatedAt { at, id }
            }
            (1, SortKey::Name) => {
                let name = String::from_utf8(key.to_vec()).map_err(|_| CursorError::Malformed)?;
                // PostgreSQL text cannot hold NUL, so no record has such a name.
                if name.contains('\0') {
                    return Err(CursorError::Malformed);
                }
                Position::Name { name, id }
            }
            _ => return Err(CursorError::Mismatch),
        };
        Ok((position, read_at))
    }

    fn tag(&self, scope: &CursorScope<'_>, body: &[u8]) -> [u8; TAG_LEN] {
        self.secrets.tag(&scope_fields(scope), body)
    }
}

/// What a cursor's tag covers besides its bytes: its label and everything it is bound to.
fn scope_fields<'a>(scope: &'a CursorScope<'a>) -> [&'a [u8]; 6] {
    [
        b"lectern-cursor".as_slice(),
        scope.resource.as_bytes(),
        scope.workspace_id.as_bytes(),
        scope.kind.as_bytes(),
        scope.search.map_or(b"\x00none".as_slice(), str::as_bytes),
        scope.sort.as_str().as_bytes(),
    ]
}

#[cfg(test)]
mod tests {
    use secrecy::SecretString;

    use super::*;

    fn signer() -> CursorSigner {
        CursorSigner::new(
            SigningSecrets::only(SecretString::from("cursor secret".to_owned())),
            Duration::from_secs(86_400),
        )
    }

    fn scope(workspace_id: Uuid) -> CursorScope<'static> {
        CursorScope { resource: "contacts", workspace_id, kind: "all", search: Some("acme"), sort: SortKey::CreatedAt }
    }

    fn position() -> Position {
        Position::CreatedAt { at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(), id: Uuid::new_v4() }
    }

    #[test]
    fn a_cursor_round_trips_exactly() {
        let workspace = Uuid::new_v4();
        let token = signer().issue(&scope(workspace), &position());
        assert_eq!(signer().open(&token, &scope(workspace)), Ok(position_from(&token, workspace)));
        let name = Position::Name { name: "Zoë & Co. ✓".to_owned(), id: Uuid::new_v4() };
        let name_scope = CursorScope { sort: SortKey::Name, ..scope(workspace) };
        let token = signer().issue(&name_scope, &name);
        assert_eq!(signer().open(&token, &name_scope), Ok(name));
    }

    fn position_from(token: &str, workspace: Uuid) -> Position {
        signer().open(token, &scope(workspace)).unwrap()
    }

    #[test]
    fn every_changed_byte_is_detected() {
        let workspace = Uuid::new_v4();
        let token = signer().issue(&scope(workspace), &position());
        let bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for index in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[index] ^= 1;
            let altered = URL_SAFE_NO_PAD.encode(altered);
            assert!(signer().open(&altered, &scope(workspace)).is_err(), "byte {index}");
        }
    }

    #[test]
    fn a_cursor_is_bound_to_workspace_filter_and_sort() {
        let workspace = Uuid::new_v4();
        let token = signer().issue(&scope(workspace), &position());
        let others = [
            scope(Uuid::new_v4()),
            CursorScope { resource: "items", ..scope(workspace) },
            CursorScope { kind: "customer", ..scope(workspace) },
            CursorScope { search: None, ..scope(workspace) },
            CursorScope { search: Some("acm"), ..scope(workspace) },
            CursorScope { sort: SortKey::Name, ..scope(workspace) },
        ];
        for other in others {
            assert_eq!(signer().open(&token, &other), Err(CursorError::Mismatch), "{other:?}");
        }
    }

    #[test]
    fn another_secret_cannot_open_it() {
        let workspace = Uuid::new_v4();
        let token = signer().issue(&scope(workspace), &position());
        let other = CursorSigner::new(
            SigningSecrets::only(SecretString::from("other".to_owned())),
            Duration::from_secs(86_400),
        );
        assert_eq!(other.open(&token, &scope(workspace)), Err(CursorError::Mismatch));
    }

    #[test]
    fn cursors_expire_after_their_lifetime() {
        let workspace = Uuid::new_v4();
        let issued = Utc::now() - chrono::Duration::hours(25);
        let token = signer().issue_at(&scope(workspace), &position(), 0, issued);
        assert_eq!(signer().open(&token, &scope(workspace)), Err(CursorError::Expired));
        let fresh = signer().issue_at(&scope(workspace), &position(), 0, Utc::now() - chrono::Duration::hours(23));
        assert!(signer().open(&fresh, &scope(workspace)).is_ok());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let workspace = Uuid::new_v4();
        for garbage in ["", "!!!", "AAAA", "a", &"A".repeat(100), "eyJ0eXAiOiJKV1QifQ"] {
            assert!(signer().open(garbage, &scope(workspace)).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn a_cursor_carries_the_position_its_page_was_read_at() {
        let workspace = Uuid::new_v4();
        let at = position();
        let token = signer().issue_read_at(&scope(workspace), &at, 1 << 40);
        assert_eq!(signer().open_read_at(&token, &scope(workspace)), Ok((at.clone(), 1 << 40)));
        let by_name = Position::Name { name: "Acme".to_owned(), id: Uuid::new_v4() };
        let name_scope = CursorScope { sort: SortKey::Name, ..scope(workspace) };
        let token = signer().issue_read_at(&name_scope, &by_name, 7);
        assert_eq!(signer().open_read_at(&token, &name_scope), Ok((by_name, 7)));
    }

    #[test]
    fn a_cursor_without_a_read_position_is_written_in_the_first_format() {
        let token = signer().issue(&scope(Uuid::new_v4()), &position());
        assert_eq!(URL_SAFE_NO_PAD.decode(token).map(|bytes| bytes[0]), Ok(UNPOSITIONED_VERSION));
    }

    #[test]
    fn a_cursor_of_the_first_format_still_opens_as_read_at_the_start() {
        let workspace = Uuid::new_v4();
        let id = Uuid::new_v4();
        let mut bytes = vec![UNPOSITIONED_VERSION];
        bytes.extend_from_slice(&Utc::now().timestamp().to_be_bytes());
        bytes.push(1);
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(b"Acme");
        let name_scope = CursorScope { sort: SortKey::Name, ..scope(workspace) };
        let tag = signer().tag(&name_scope, &bytes);
        bytes.extend_from_slice(&tag);
        let opened = signer().open_read_at(&URL_SAFE_NO_PAD.encode(&bytes), &name_scope);
        assert_eq!(opened, Ok((Position::Name { name: "Acme".to_owned(), id }, 0)));
    }
}
