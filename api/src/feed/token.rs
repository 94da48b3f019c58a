//! Sync tokens: opaque, signed, never expiring.
//!
//! A token carries the feed position its response reached: a transaction id and a record
//! id. Tokens of the first format (a per-workspace counter's position, before the feed
//! was ordered by transaction) still verify and resume from the beginning, which repeats
//! changes and skips none. Its HMAC-SHA256
//! tag also covers the operation and the workspace, which do not travel in it, and a
//! label no listing cursor's tag covers: a token replayed in another workspace or
//! operation, a listing cursor passed as `since`, or a token altered in any byte fails
//! verification. Signed with the cursor secret, so tokens outlive restarts and
//! releases for as long as the deployment keeps that secret.
//!
//! A token also carries the WAL position its page was read at, so that the next page is
//! read where at least that much is replayed (see `reads::replicas`); tokens of the format
//! before it open as read at the start of the WAL.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

use super::position::FeedPosition;
use crate::reads::replicas::WalPosition;
use crate::signing::{SigningSecrets, TAG_LEN};

/// The format's version, first byte of every token.
const VERSION: u8 = 3;
/// The second format's version: a position without the WAL position it was read at.
const UNREAD_VERSION: u8 = 2;
/// The first format's version: a counter's position, which no longer orders the feed.
const COUNTER_VERSION: u8 = 1;
/// version, transaction, record id.
const UNREAD_BODY_LEN: usize = 1 + 8 + 16;
/// The same, then the WAL position.
const BODY_LEN: usize = UNREAD_BODY_LEN + 8;
/// version, position.
const COUNTER_BODY_LEN: usize = 1 + 8;
/// What separates a sync token's tag from a cursor's (`lectern-cursor`).
const LABEL: &[u8] = b"lectern-sync-token";

/// What a token is bound to; both must be equal when it comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedScope {
    /// The table of the feed, which names the operation.
    pub resource: &'static str,
    pub workspace_id: Uuid,
}

/// Why `since` was refused; each message says what to do instead.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "is not a syncToken issued by this API; pass a `syncToken` unchanged, `latest`, or nothing to start \
         from the beginning"
    )]
    Malformed,
    #[error(
        "does not belong to this feed (sync tokens are bound to the key's workspace and to the operation, and \
         cannot be altered), or was signed with a secret this server has retired; pass a `syncToken` of this \
         operation unchanged, or start over without `since`"
    )]
    Mismatch,
    #[error(
        "is ahead of everything this database holds: it was restored to an earlier point, or replaced by a \
         copy of itself, after the token was issued, and changes made in between may be lost; discard what you \
         synced and start over without `since`"
    )]
    AheadOfDatabase,
}

/// Issues and opens sync tokens under the server's cursor secret.
#[derive(Clone)]
pub struct SyncTokens {
    secrets: SigningSecrets,
}

impl SyncTokens {
    pub fn new(secrets: SigningSecrets) -> Self {
        Self { secrets }
    }

    /// The token of `position` in `scope`'s feed, read at the start of the WAL.
    pub fn issue(&self, scope: FeedScope, position: FeedPosition) -> String {
        self.issue_read_at(scope, position, 0)
    }

    /// The token of `position` in `scope`'s feed, on a page read at `read_at` (0: unknown,
    /// and then in the format before read positions).
    pub fn issue_read_at(&self, scope: FeedScope, position: FeedPosition, read_at: WalPosition) -> String {
        let mut bytes = Vec::with_capacity(BODY_LEN + TAG_LEN);
        // Without a read position, the format before it: the release before it reads that.
        bytes.push(if read_at == 0 { UNREAD_VERSION } else { VERSION });
        bytes.extend_from_slice(&position.transaction.to_be_bytes());
        bytes.extend_from_slice(position.id.as_bytes());
        if read_at != 0 {
            bytes.extend_from_slice(&read_at.to_be_bytes());
        }
        let tag = self.secrets.tag(&scope_fields(&scope), &bytes);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The position `token` carries, if this server issued it for `scope`.
    pub fn open(&self, token: &str, scope: FeedScope) -> Result<FeedPosition, TokenError> {
        self.open_read_at(token, scope).map(|(position, _)| position)
    }

    /// The position `token` carries and the WAL position its page was read at.
    pub fn open_read_at(&self, token: &str, scope: FeedScope) -> Result<(FeedPosition, WalPosition), TokenError> {
        // Anything longer is not ours; refused before decoding.
        if token.len() > 4 * (BODY_LEN + TAG_LEN) {
            return Err(TokenError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| TokenError::Malformed)?;
        let body_len = match bytes.first() {
            Some(&VERSION) => BODY_LEN,
            Some(&UNREAD_VERSION) => UNREAD_BODY_LEN,
            Some(&COUNTER_VERSION) => COUNTER_BODY_LEN,
            _ => return Err(TokenError::Malformed),
        };
        if bytes.len() != body_len + TAG_LEN {
            return Err(TokenError::Malformed);
        }
        let (body, tag) = bytes.split_at(body_len);
        if !self.secrets.verifies(&scope_fields(&scope), body, tag) {
            return Err(TokenError::Mismatch);
        }
        if body_len == COUNTER_BODY_LEN {
            return Ok((FeedPosition::START, 0));
        }
        let transaction = i64::from_be_bytes(body[1..9].try_into().map_err(|_| TokenError::Malformed)?);
        let id = uuid::Uuid::from_slice(&body[9..25]).map_err(|_| TokenError::Malformed)?;
        let read_at = match body_len {
            BODY_LEN => i64::from_be_bytes(body[25..33].try_into().map_err(|_| TokenError::Malformed)?),
            _ => 0,
        };
        // Only positions this server handed out verify, and those are never negative.
        if transaction < 0 {
            return Err(TokenError::Malformed);
        }
        Ok((FeedPosition { transaction, id }, read_at))
    }
}

/// What a token's tag covers besides its bytes: its label, the feed and the workspace.
fn scope_fields(scope: &FeedScope) -> [&[u8]; 3] {
    [LABEL, scope.resource.as_bytes(), scope.workspace_id.as_bytes()]
}

#[cfg(test)]
mod tests {
    use secrecy::SecretString;

    use super::*;

    fn tokens() -> SyncTokens {
        SyncTokens::new(SigningSecrets::only(SecretString::from("cursor secret".to_owned())))
    }

    fn scope(workspace_id: Uuid) -> FeedScope {
        FeedScope { resource: "contacts", workspace_id }
    }

    fn at(transaction: i64) -> FeedPosition {
        FeedPosition { transaction, id: Uuid::new_v4() }
    }

    #[test]
    fn a_token_round_trips_its_position() {
        let workspace = Uuid::new_v4();
        for position in [FeedPosition::START, at(1), at(41), FeedPosition::after_transaction(i64::MAX)] {
            let token = tokens().issue(scope(workspace), position);
            assert_eq!(tokens().open(&token, scope(workspace)), Ok(position));
            assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
        }
    }

    #[test]
    fn every_changed_byte_is_detected() {
        let workspace = Uuid::new_v4();
        let bytes = URL_SAFE_NO_PAD.decode(tokens().issue(scope(workspace), at(12))).unwrap();
        for index in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[index] ^= 1;
            assert!(tokens().open(&URL_SAFE_NO_PAD.encode(altered), scope(workspace)).is_err(), "byte {index}");
        }
    }

    #[test]
    fn a_token_is_bound_to_its_workspace_operation_and_secret() {
        let workspace = Uuid::new_v4();
        let token = tokens().issue(scope(workspace), at(12));
        assert_eq!(tokens().open(&token, scope(Uuid::new_v4())), Err(TokenError::Mismatch));
        assert_eq!(
            tokens().open(&token, FeedScope { resource: "items", workspace_id: workspace }),
            Err(TokenError::Mismatch)
        );
        let other = SyncTokens::new(SigningSecrets::only(SecretString::from("another secret".to_owned())));
        assert_eq!(other.open(&token, scope(workspace)), Err(TokenError::Mismatch));
    }

    #[test]
    fn a_listing_cursor_is_not_a_sync_token() {
        use crate::listing::cursor::{CursorScope, CursorSigner};
        use crate::listing::{Position, SortKey};
        let workspace = Uuid::new_v4();
        let cursors = CursorSigner::new(
            SigningSecrets::only(SecretString::from("cursor secret".to_owned())),
            std::time::Duration::from_secs(60),
        );
        let cursor_scope = CursorScope {
            resource: "contacts",
            workspace_id: workspace,
            kind: "all",
            search: None,
            sort: SortKey::Name,
        };
        let cursor = cursors.issue(&cursor_scope, &Position::Name { name: "a".to_owned(), id: workspace });
        assert!(tokens().open(&cursor, scope(workspace)).is_err());
    }

    #[test]
    fn a_token_of_the_counter_format_resumes_from_the_beginning_and_stays_bound() {
        let workspace = Uuid::new_v4();
        let mut bytes = vec![COUNTER_VERSION];
        bytes.extend_from_slice(&200_000_i64.to_be_bytes());
        let tag = tokens().secrets.tag(&scope_fields(&scope(workspace)), &bytes);
        bytes.extend_from_slice(&tag);
        let token = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(tokens().open(&token, scope(workspace)), Ok(FeedPosition::START));
        assert_eq!(tokens().open(&token, scope(Uuid::new_v4())), Err(TokenError::Mismatch));
        let mut altered = bytes.clone();
        altered[3] ^= 1;
        assert!(tokens().open(&URL_SAFE_NO_PAD.encode(altered), scope(workspace)).is_err());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let workspace = Uuid::new_v4();
        for garbage in ["", "!!!", "AAAA", "a", &"A".repeat(10_000), "latest ", "%00", "AQ"] {
            assert_eq!(tokens().open(garbage, scope(workspace)), Err(TokenError::Malformed), "{garbage:?}");
        }
    }

    #[test]
    fn a_token_carries_the_position_its_page_was_read_at() {
        let workspace = Uuid::new_v4();
        let token = tokens().issue_read_at(scope(workspace), at(12), 1 << 40);
        let (position, read_at) = tokens().open_read_at(&token, scope(workspace)).unwrap();
        assert_eq!(read_at, 1 << 40);
        assert_eq!(position.transaction, 12);
    }

    #[test]
    fn a_token_without_a_read_position_is_written_in_the_format_before_it() {
        let token = tokens().issue(scope(Uuid::new_v4()), at(5));
        assert_eq!(URL_SAFE_NO_PAD.decode(token).map(|bytes| bytes[0]), Ok(UNREAD_VERSION));
    }

    #[test]
    fn a_token_of_the_format_before_the_read_position_still_opens_where_it_was() {
        let workspace = Uuid::new_v4();
        let position = at(41);
        let mut bytes = vec![UNREAD_VERSION];
        bytes.extend_from_slice(&position.transaction.to_be_bytes());
        bytes.extend_from_slice(position.id.as_bytes());
        let tag = tokens().secrets.tag(&scope_fields(&scope(workspace)), &bytes);
        bytes.extend_from_slice(&tag);
        let token = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(tokens().open_read_at(&token, scope(workspace)), Ok((position, 0)));
    }
}
