//! Batches by workspace: the messages of a pull split so that the batches in flight
//! together write different workspaces.
//!
//! A batch advances the changes feed's counter of every workspace it writes and holds
//! that row's lock until it commits (`lectern_read_model`'s upsert), so two batches in
//! flight that share a workspace run one after the other. Pulled in stream order, every
//! batch shares the busiest workspaces with the others, and the four batches in flight
//! became one: the drain ran at 0.69× the build before the feed, its backends waiting on
//! each other's counters (`bench/history.md`). Split by the workspace into as many
//! shards as batches in flight, one batch of a shard applied at a time, the batches in
//! flight write disjoint workspaces and none waits on another's counters.
//!
//! A shard's turn is waited for a while only: a batch held up inside PostgreSQL (a row
//! locked by hand) must not hold up every other workspace of its shard, so after
//! [`TURN_PATIENCE`] the next batch of the shard goes ahead beside it, and waits only
//! where the two share a workspace. Projector processes do not know each other's shards:
//! two of them still wait on each other where their batches share a workspace, which
//! slows them and never makes them wrong.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use uuid::Uuid;

/// How long a batch waits for its shard's previous batch before going ahead beside it:
/// several times a large batch's apply under load (about 0.3 s while a backlog drains),
/// far less than the time a held batch is reported stuck after.
pub const TURN_PATIENCE: Duration = Duration::from_secs(2);

/// The shards of one projector process, each with its turn.
pub struct Shards {
    turns: Vec<Arc<Mutex<()>>>,
}

impl Shards {
    /// `count` shards (at least one).
    pub fn new(count: usize) -> Self {
        Self { turns: (0..count.max(1)).map(|_| Arc::default()).collect() }
    }

    pub fn count(&self) -> usize {
        self.turns.len()
    }

    /// `items` in groups of one shard each, at most `batch_size` long, each in the order
    /// of `items`; `subject` gives an item's NATS subject.
    pub fn split<T>(&self, items: Vec<T>, batch_size: usize, subject: impl Fn(&T) -> &str) -> Vec<(usize, Vec<T>)> {
        let mut by_shard: Vec<Vec<T>> = (0..self.count()).map(|_| Vec::new()).collect();
        for item in items {
            let shard = shard_of(subject(&item), self.count());
            by_shard[shard].push(item);
        }
        let batch_size = batch_size.max(1);
        let mut groups = Vec::new();
        for (shard, mut items) in by_shard.into_iter().enumerate() {
            while items.len() > batch_size {
                let rest = items.split_off(batch_size);
                groups.push((shard, std::mem::replace(&mut items, rest)));
            }
            if !items.is_empty() {
                groups.push((shard, items));
            }
        }
        groups
    }

    /// Waits for `shard`'s turn, [`TURN_PATIENCE`] at most; the turn lasts as long as the
    /// guard. `None`: the wait ran out, and the batch goes ahead without the turn.
    pub async fn turn(&self, shard: usize) -> Option<OwnedMutexGuard<()>> {
        let turn = self.turns.get(shard % self.count())?.clone();
        tokio::time::timeout(TURN_PATIENCE, turn.lock_owned()).await.ok()
    }
}

/// The shard of a message on `subject` (`changes.<workspace>.<kind>.<id>`): its
/// workspace's, the same for every spelling of the workspace's id. A subject of
/// another shape (a dead letter to be) goes anywhere, consistently.
fn shard_of(subject: &str, count: usize) -> usize {
    let workspace = subject.split('.').nth(1).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    match Uuid::try_parse(workspace) {
        Ok(id) => id.hash(&mut hasher),
        Err(_) => workspace.hash(&mut hasher),
    }
    let count = u64::try_from(count.max(1)).unwrap_or(u64::MAX);
    usize::try_from(hasher.finish() % count).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(workspace: &str, entity: Uuid) -> String {
        format!("changes.{workspace}.contacts.{entity}")
    }

    #[test]
    fn every_message_of_a_workspace_lands_in_one_shard_whatever_the_spelling_of_its_id() {
        for _ in 0..100 {
            let workspace = Uuid::new_v4();
            let lower = shard_of(&subject(&workspace.to_string(), Uuid::new_v4()), 4);
            let upper = shard_of(&subject(&workspace.to_string().to_uppercase(), Uuid::new_v4()), 4);
            assert_eq!(lower, upper);
            assert!(lower < 4);
        }
    }

    #[test]
    fn workspaces_spread_over_every_shard() {
        let mut seen = [0_usize; 4];
        for _ in 0..1_000 {
            seen[shard_of(&subject(&Uuid::new_v4().to_string(), Uuid::new_v4()), 4)] += 1;
        }
        assert!(seen.iter().all(|count| *count > 150), "{seen:?}");
    }

    #[test]
    fn a_split_keeps_every_message_once_in_order_within_the_batch_size() {
        let shards = Shards::new(4);
        let workspaces: Vec<String> = (0..7).map(|_| Uuid::new_v4().to_string()).collect();
        let subjects: Vec<String> =
            (0..500).map(|index| subject(&workspaces[index % 7 % (1 + index % 3)], Uuid::new_v4())).collect();
        let numbered: Vec<(usize, &str)> = subjects.iter().map(String::as_str).enumerate().collect();
        let groups = shards.split(numbered.clone(), 30, |(_, subject)| subject);
        let mut all: Vec<usize> = Vec::new();
        for (shard, group) in &groups {
            assert!(!group.is_empty() && group.len() <= 30, "{}", group.len());
            assert!(group.windows(2).all(|pair| pair[0].0 < pair[1].0), "out of order within a group");
            assert!(group.iter().all(|(_, subject)| shard_of(subject, 4) == *shard), "a message in another shard");
            all.extend(group.iter().map(|(index, _)| *index));
        }
        all.sort_unstable();
        assert_eq!(all, (0..500).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_turn_is_exclusive_until_patience_runs_out() {
        tokio::time::pause();
        let shards = Shards::new(2);
        let first = shards.turn(1).await;
        assert!(first.is_some());
        assert!(shards.turn(0).await.is_some(), "another shard's turn is free");
        let started = tokio::time::Instant::now();
        assert!(shards.turn(1).await.is_none(), "a turn taken twice");
        assert!(started.elapsed() >= TURN_PATIENCE);
        drop(first);
        assert!(shards.turn(1).await.is_some());
    }
}
