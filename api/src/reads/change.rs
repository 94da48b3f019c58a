//! What a notification says changed, read once for every cache that follows it.
//!
//! Two channels carry the changes the API caches depend on. The read model's
//! statement-level triggers notify [`READ_MODEL_CHANNEL`] with `<workspace> <table>
//! <position>` for every committed write (no position when rows were deleted, `*` for a
//! truncate); `api_keys`' trigger notifies [`KEYS_CHANNEL`] with the changed key's id
//! (`*` for a truncate). The listener parses each payload here, once, into a [`Change`];
//! a payload this build cannot read becomes "everything may have changed", never a
//! guess.

use uuid::Uuid;

use super::freshness::Trust;

/// The channel the read model's triggers notify.
pub const READ_MODEL_CHANNEL: &str = "lectern_changes";
/// The channel `api_keys`' trigger notifies.
pub const KEYS_CHANNEL: &str = "lectern_api_keys";

/// A notification channel the API follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Channel {
    ReadModel,
    Keys,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadModel => READ_MODEL_CHANNEL,
            Self::Keys => KEYS_CHANNEL,
        }
    }

    fn named(name: &str) -> Option<Self> {
        [Self::ReadModel, Self::Keys].into_iter().find(|channel| channel.name() == name)
    }
}

/// One notification, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Rows of one table of one workspace were written by a transaction at `position`,
    /// or deleted (`position` is `None`: what is left is unknown).
    Rows { workspace_id: Uuid, resource: &'static str, position: Option<i64> },
    /// Any row of the read model may have changed (a truncate, or a payload this build
    /// cannot read).
    AnyRows,
    /// One API key's record changed.
    Key(String),
    /// Any key's record may have changed.
    AnyKey,
}

impl Change {
    /// The change a notification on `channel` with `payload` announces; `None` for a
    /// channel the API does not follow.
    pub fn parse(channel: &str, payload: &str) -> Option<Self> {
        Some(match Channel::named(channel)? {
            Channel::ReadModel => Self::rows(payload).unwrap_or(Self::AnyRows),
            Channel::Keys if payload == "*" || payload.is_empty() => Self::AnyKey,
            Channel::Keys => Self::Key(payload.to_owned()),
        })
    }

    fn rows(payload: &str) -> Option<Self> {
        let mut fields = payload.split(' ');
        let workspace_id = Uuid::try_parse(fields.next()?).ok()?;
        let table = fields.next()?;
        let resource = [lectern_read_model::contacts::TABLE, lectern_read_model::items::TABLE]
            .into_iter()
            .find(|known| *known == table)?;
        let position = fields.next().and_then(|text| text.parse::<i64>().ok());
        Some(Self::Rows { workspace_id, resource, position })
    }

    /// The workspace whose rows changed, when the change names one.
    pub fn workspace(&self) -> Option<Uuid> {
        match self {
            Self::Rows { workspace_id, .. } => Some(*workspace_id),
            _ => None,
        }
    }
}

/// Something a channel's changes keep fresh: a cache, or what a cache depends on.
pub trait Follower: Send + Sync {
    /// The channel whose changes it follows.
    fn channel(&self) -> Channel;
    /// Takes in one change of its channel.
    fn changed(&self, change: &Change);
    /// Every change may have been missed (the listener was down): drops what it knows.
    fn forget_everything(&self);
    /// Whether its channel is being listened to, which the listener sets.
    fn trust(&self) -> &Trust;

    /// The database behind the address is another history than before
    /// ([`super::history`]): drops what was learnt of the other one. For a cache kept by
    /// notifications that is everything it holds.
    fn new_history(&self) {
        self.forget_everything();
    }

    /// Drops everything, and trusts what is learnt from now on only if `trusted`.
    fn reset(&self, trusted: bool) {
        self.forget_everything();
        self.trust().set(trusted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_names_its_workspace_table_and_position_and_a_delete_has_no_position() {
        let workspace = Uuid::new_v4();
        assert_eq!(
            Change::parse(READ_MODEL_CHANNEL, &format!("{workspace} contacts 42")),
            Some(Change::Rows { workspace_id: workspace, resource: "contacts", position: Some(42) })
        );
        assert_eq!(
            Change::parse(READ_MODEL_CHANNEL, &format!("{workspace} items")),
            Some(Change::Rows { workspace_id: workspace, resource: "items", position: None })
        );
    }

    #[test]
    fn a_payload_this_build_cannot_read_means_anything_may_have_changed() {
        let workspace = Uuid::new_v4();
        for payload in ["*", "", "not-a-uuid contacts 1", &format!("{workspace} invoices 1"), &workspace.to_string()] {
            assert_eq!(Change::parse(READ_MODEL_CHANNEL, payload), Some(Change::AnyRows), "{payload:?}");
        }
        assert_eq!(Change::parse(KEYS_CHANNEL, "*"), Some(Change::AnyKey));
        assert_eq!(Change::parse(KEYS_CHANNEL, "k1"), Some(Change::Key("k1".to_owned())));
        assert_eq!(Change::parse("another_channel", "x"), None);
    }
}
