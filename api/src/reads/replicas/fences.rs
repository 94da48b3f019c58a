//! Where each workspace's reads must have replayed to before a replica may serve them:
//! a fence per workspace whose change was announced, a floor for all of them, folded
//! together when there are too many to keep.

use std::collections::HashMap;

use uuid::Uuid;

use super::WalPosition;

/// Past this many fenced workspaces, the fences fold into one for all: memory stays
/// bounded however many workspaces change between two samples.
const MAX_FENCES: usize = 100_000;

/// Where a workspace's reads must have replayed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fence {
    /// A change was announced and the primary's position after it is being read: only
    /// the primary may serve meanwhile. Holds the announcement's number.
    Pending(u64),
    At(WalPosition),
}

#[derive(Default)]
pub(super) struct Fences {
    pub(super) by_workspace: HashMap<Uuid, Fence>,
    /// Every workspace's fence at least: fences folded together, and the position after
    /// a listener outage (whose changes were never announced).
    pub(super) floor: Option<Fence>,
    /// Announcements so far; a position read after announcement `n` settles fences up to `n`.
    pub(super) announced: u64,
}

impl Fences {
    pub(super) fn announce(&mut self) -> u64 {
        self.announced += 1;
        self.announced
    }

    /// The position a read of `workspace_id` needs, or `None` while only the primary may serve it.
    pub(super) fn needed(&self, workspace_id: Uuid) -> Option<WalPosition> {
        let floor = match self.floor {
            Some(Fence::Pending(_)) => return None,
            Some(Fence::At(position)) => position,
            None => 0,
        };
        match self.by_workspace.get(&workspace_id) {
            Some(Fence::Pending(_)) => None,
            Some(Fence::At(position)) => Some(floor.max(*position)),
            None => Some(floor),
        }
    }

    /// Settles every fence announced up to `announcement` at `position`.
    pub(super) fn settle(&mut self, announcement: u64, position: WalPosition) {
        let settle = |fence: &mut Fence| {
            if matches!(*fence, Fence::Pending(number) if number <= announcement) {
                *fence = Fence::At(position);
            }
        };
        self.by_workspace.values_mut().for_each(settle);
        if let Some(floor) = self.floor.as_mut() {
            settle(floor);
        }
    }

    pub(super) fn has_pending(&self) -> bool {
        matches!(self.floor, Some(Fence::Pending(_)))
            || self.by_workspace.values().any(|fence| matches!(fence, Fence::Pending(_)))
    }

    /// Drops the fences every replica has passed; folds the rest into the floor when
    /// there are too many to keep.
    pub(super) fn prune(&mut self, replayed_by_all: WalPosition) {
        self.by_workspace.retain(|_, fence| !matches!(fence, Fence::At(position) if *position <= replayed_by_all));
        if self.by_workspace.len() > MAX_FENCES {
            let highest = self
                .by_workspace
                .values()
                .filter_map(|fence| match fence {
                    Fence::At(position) => Some(*position),
                    Fence::Pending(_) => None,
                })
                .max()
                .unwrap_or(0);
            self.by_workspace.retain(|_, fence| matches!(fence, Fence::Pending(_)));
            self.floor = match self.floor {
                Some(Fence::Pending(number)) => Some(Fence::Pending(number)),
                Some(Fence::At(floor)) => Some(Fence::At(floor.max(highest))),
                None => Some(Fence::At(highest)),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_fence_leaves_only_the_primary_until_settled_past_it() {
        let mut fences = Fences::default();
        let workspace = Uuid::new_v4();
        let number = fences.announce();
        fences.by_workspace.insert(workspace, Fence::Pending(number));
        assert_eq!(fences.needed(workspace), None);
        assert_eq!(fences.needed(Uuid::new_v4()), Some(0));
        fences.settle(number, 500);
        assert_eq!(fences.needed(workspace), Some(500));
    }

    #[test]
    fn a_position_read_before_an_announcement_does_not_settle_it() {
        let mut fences = Fences::default();
        let workspace = Uuid::new_v4();
        let read_after = fences.announce();
        let later = fences.announce();
        fences.by_workspace.insert(workspace, Fence::Pending(later));
        fences.settle(read_after, 500);
        assert_eq!(fences.needed(workspace), None);
    }

    #[test]
    fn an_outage_fences_every_workspace_and_too_many_fences_fold_into_one() {
        let mut fences = Fences::default();
        let number = fences.announce();
        fences.floor = Some(Fence::Pending(number));
        assert_eq!(fences.needed(Uuid::new_v4()), None);
        fences.settle(number, 70);
        assert_eq!(fences.needed(Uuid::new_v4()), Some(70));
        for position in 0..=i64::try_from(MAX_FENCES).unwrap_or(0) {
            fences.by_workspace.insert(Uuid::new_v4(), Fence::At(100 + position));
        }
        fences.prune(0);
        assert!(fences.by_workspace.is_empty());
        assert_eq!(fences.needed(Uuid::new_v4()), Some(100 + i64::try_from(MAX_FENCES).unwrap_or(0)));
    }

    #[test]
    fn fences_every_replica_passed_are_dropped() {
        let mut fences = Fences::default();
        let (passed, ahead) = (Uuid::new_v4(), Uuid::new_v4());
        fences.by_workspace.insert(passed, Fence::At(10));
        fences.by_workspace.insert(ahead, Fence::At(30));
        fences.prune(20);
        assert!(!fences.by_workspace.contains_key(&passed));
        assert_eq!(fences.needed(ahead), Some(30));
    }
}
