//! Sync tokens: opaque, signed, never expiring.
//!
//! A token carries the feed position its response reached (a transaction's position and a
//! record id), the history of the database that position belongs to, and the WAL position
//! its page was read at. Its HMAC-SHA256 tag also covers the operation and the workspace,
//! which do not travel in it, and a label no listing cursor's tag covers: a token replayed
//! in another workspace or operation, a listing cursor passed as `since`, or a token
//! altered in any byte fails verification. Signed with the cursor secret, so tokens outlive
//! restarts and releases for as long as the deployment keeps that secret.
//!
//! The history is what lets a token from a sibling history (a second failover to a standby
//! that never saw the first, one backup restored twice) be told to start over rather than
//! silently skip what the other history wrote (see `feed::lineage`). The WAL position sends
//! the next page where at least that much is replayed (see `reads::replicas`).
//!
//! Tokens of every earlier format still open: without a history (read as of the history
//! their position falls in), without a WAL position (read at the start of the WAL), and
//! the first format (a per-workspace counter's position, before the feed was ordered by
//! transaction), which resumes from the beginning, repeating changes and skipping none.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

use super::position::FeedPosition;
use crate::error::ApiError;
use crate::reads::history::HistoryId;
use crate::reads::replicas::WalPosition;
use crate::signing::{SigningSecrets, TAG_LEN};

/// The format's version, first byte of every token.
const VERSION: u8 = 4;
/// The third format's version: without the history.
const READ_AT_VERSION: u8 = 3;
/// The second format's version: a position without the WAL position it was read at.
const UNREAD_VERSION: u8 = 2;
/// The first format's version: a counter's position, which no longer orders the feed.
const COUNTER_VERSION: u8 = 1;
/// version, transaction, record id.
const UNREAD_BODY_LEN: usize = 1 + 8 + 16;
/// The same, then the WAL position.
const READ_AT_BODY_LEN: usize = UNREAD_BODY_LEN + 8;
/// The same, then the history.
const BODY_LEN: usize = READ_AT_BODY_LEN + 8;
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

/// Where a token says its feed stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub position: FeedPosition,
    /// The history `position` belongs to; `None` in tokens of the formats before it.
    pub history: Option<HistoryId>,
    /// The WAL position its page was read at (0: unknown).
    pub read_at: WalPosition,
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
    #[error(
        "was issued by a history of the database that this one does not descend from (a server that failed over \
         apart from it, another restore of the same backup, or a primary this one replaced), and changes made in \
         either may be missing from what you synced; discard what you synced and start over without `since`"
    )]
    FromAnotherHistory,
}

/// Issues and opens sync tokens under the server's cursor secret.
#[derive(Clone)]
pub struct SyncTokens {
    secrets: SigningSecrets,
    /// Issue tokens in the format the release before this one reads (no history): while
    /// processes of both run side by side, as in a rolling upgrade.
    previous_format: bool,
}

impl SyncTokens {
    pub fn new(secrets: SigningSecrets) -> Self {
        Self { secrets, previous_format: false }
    }

    /// Tokens the release before this one also opens, without the history they were issued
    /// in (see [`SyncTokens::previous_format`]).
    pub fn in_previous_format(mut self, previous_format: bool) -> Self {
        self.previous_format = previous_format;
        self
    }

    /// The token of `standing` in `scope`'s feed.
    pub fn issue(&self, scope: FeedScope, standing: Standing) -> String {
        let mut bytes = Vec::with_capacity(BODY_LEN + TAG_LEN);
        let Standing { position, history, read_at } = standing;
        let (version, history) = match history {
            Some(history) if !self.previous_format => (VERSION, Some(history)),
            // The formats an earlier release reads: without a read position when there is
            // none (the release before replicas reads only that).
            _ if read_at == 0 => (UNREAD_VERSION, None),
            _ => (READ_AT_VERSION, None),
        };
        bytes.push(version);
        bytes.extend_from_slice(&position.transaction.to_be_bytes());
        bytes.extend_from_slice(position.id.as_bytes());
        if version != UNREAD_VERSION {
            bytes.extend_from_slice(&read_at.to_be_bytes());
        }
        if let Some(history) = history {
            bytes.extend_from_slice(&history.to_be_bytes());
        }
        let tag = self.secrets.tag(&scope_fields(&scope), &bytes);
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Where `token` says its feed stands, if this server issued it for `scope`.
    pub fn open(&self, token: &str, scope: FeedScope) -> Result<Standing, TokenError> {
        // Anything longer is not ours; refused before decoding.
        if token.len() > 4 * (BODY_LEN + TAG_LEN) {
            return Err(TokenError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| TokenError::Malformed)?;
        let body_len = match bytes.first() {
            Some(&VERSION) => BODY_LEN,
            Some(&READ_AT_VERSION) => READ_AT_BODY_LEN,
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
            return Ok(Standing { position: FeedPosition::START, history: None, read_at: 0 });
        }
        let number = |at: usize| body.get(at..at + 8).and_then(|bytes| bytes.try_into().ok()).map(i64::from_be_bytes);
        let transaction = number(1).ok_or(TokenError::Malformed)?;
        let id = Uuid::from_slice(&body[9..25]).map_err(|_| TokenError::Malformed)?;
        let read_at = if body_len >= READ_AT_BODY_LEN { number(25).ok_or(TokenError::Malformed)? } else { 0 };
        let history = if body_len == BODY_LEN { Some(number(33).ok_or(TokenError::Malformed)?) } else { None };
        // Only positions and histories this server handed out verify: never negative, and
        // no history is 0.
        if transaction < 0 || history.is_some_and(|history| history <= 0) {
            return Err(TokenError::Malformed);
        }
        Ok(Standing { position: FeedPosition { transaction, id }, history, read_at })
    }
}

/// What a token's tag covers besides its bytes: its label, the feed and the workspace.
fn scope_fields(scope: &FeedScope) -> [&[u8]; 3] {
    [LABEL, scope.resource.as_bytes(), scope.workspace_id.as_bytes()]
}

impl From<TokenError> for ApiError {
    fn from(refused: TokenError) -> Self {
        Self::SinceRefused(Box::new(refused))
    }
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

    fn standing(position: FeedPosition) -> Standing {
        Standing { position, history: Some(0x1234_5678_9abc), read_at: 1 << 40 }
    }

    /// A token of an earlier format: `body` signed as this server signs.
    fn signed(workspace: Uuid, mut body: Vec<u8>) -> String {
        let tag = tokens().secrets.tag(&scope_fields(&scope(workspace)), &body);
        body.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(&body)
    }

    #[test]
    fn a_token_round_trips_its_position_history_and_read_position() {
        let workspace = Uuid::new_v4();
        for position in [FeedPosition::START, at(1), at(41), FeedPosition::after_transaction(i64::MAX)] {
            let token = tokens().issue(scope(workspace), standing(position));
            assert_eq!(tokens().open(&token, scope(workspace)), Ok(standing(position)));
            assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
        }
    }

    #[test]
    fn every_changed_byte_is_detected() {
        let workspace = Uuid::new_v4();
        let bytes = URL_SAFE_NO_PAD.decode(tokens().issue(scope(workspace), standing(at(12)))).unwrap();
        for index in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[index] ^= 1;
            assert!(tokens().open(&URL_SAFE_NO_PAD.encode(altered), scope(workspace)).is_err(), "byte {index}");
        }
    }

    #[test]
    fn a_token_is_bound_to_its_workspace_operation_and_secret() {
        let workspace = Uuid::new_v4();
        let token = tokens().issue(scope(workspace), standing(at(12)));
        assert_eq!(tokens().open(&token, scope(Uuid::new_v4())), Err(TokenError::Mismatch));
        assert_eq!(
            tokens().open(&token, FeedScope { resource: "items", workspace_id: workspace }),
            Err(TokenError::Mismatch)
        );
        let other = SyncTokens::new(SigningSecrets::only(SecretString::from("another secret".to_owned())));
        assert_eq!(other.open(&token, scope(workspace)), Err(TokenError::Mismatch));
    }

    #[test]
    fn a_token_of_the_counter_format_resumes_from_the_beginning_and_stays_bound() {
        let workspace = Uuid::new_v4();
        let mut bytes = vec![COUNTER_VERSION];
        bytes.extend_from_slice(&200_000_i64.to_be_bytes());
        let token = signed(workspace, bytes.clone());
        assert_eq!(
            tokens().open(&token, scope(workspace)),
            Ok(Standing { position: FeedPosition::START, history: None, read_at: 0 })
        );
        assert_eq!(tokens().open(&token, scope(Uuid::new_v4())), Err(TokenError::Mismatch));
        let mut altered = URL_SAFE_NO_PAD.decode(&token).unwrap();
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
    fn tokens_of_the_formats_before_the_history_still_open_where_they_were() {
        let workspace = Uuid::new_v4();
        let position = at(41);
        let mut unread = vec![UNREAD_VERSION];
        unread.extend_from_slice(&position.transaction.to_be_bytes());
        unread.extend_from_slice(position.id.as_bytes());
        let mut read_at = unread.clone();
        read_at[0] = READ_AT_VERSION;
        read_at.extend_from_slice(&(7_i64 << 30).to_be_bytes());
        assert_eq!(
            tokens().open(&signed(workspace, unread), scope(workspace)),
            Ok(Standing { position, history: None, read_at: 0 })
        );
        assert_eq!(
            tokens().open(&signed(workspace, read_at), scope(workspace)),
            Ok(Standing { position, history: None, read_at: 7 << 30 })
        );
    }

    #[test]
    fn in_the_previous_format_a_token_leaves_its_history_out_and_its_read_position_only_when_there_is_one() {
        let workspace = Uuid::new_v4();
        let previous = tokens().in_previous_format(true);
        let position = at(5);
        let token = previous.issue(scope(workspace), standing(position));
        assert_eq!(URL_SAFE_NO_PAD.decode(&token).map(|bytes| bytes[0]), Ok(READ_AT_VERSION));
        assert_eq!(tokens().open(&token, scope(workspace)), Ok(Standing { history: None, ..standing(position) }));
        let unread = previous.issue(scope(workspace), Standing { read_at: 0, ..standing(position) });
        assert_eq!(URL_SAFE_NO_PAD.decode(&unread).map(|bytes| bytes[0]), Ok(UNREAD_VERSION));
    }

    #[test]
    fn a_token_that_names_no_history_in_the_newest_format_is_not_ours() {
        let workspace = Uuid::new_v4();
        let mut body = vec![VERSION];
        body.extend_from_slice(&5_i64.to_be_bytes());
        body.extend_from_slice(Uuid::new_v4().as_bytes());
        body.extend_from_slice(&0_i64.to_be_bytes());
        body.extend_from_slice(&0_i64.to_be_bytes());
        assert_eq!(tokens().open(&signed(workspace, body), scope(workspace)), Err(TokenError::Malformed));
    }
}
