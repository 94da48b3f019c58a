//! What the process knows of each feed's newest transaction, and the long polls waiting
//! on it.
//!
//! The read model's triggers notify `lectern_changes` with `<workspace> <table>
//! <transaction>` for every committed write. A feed's head is the newest transaction
//! known to have written it; it is *known* when every committed change of that feed was
//! written by it or an older transaction, except changes whose notification is still on
//! its way. That holds for a notified transaction (every commit is notified in turn, to
//! a listener that is up) and for what a query read while the listener was up. So an
//! empty poll at or past the head needs no SQL statement, and a long poll sleeps until
//! the head moves past its token.
//!
//! As with the other caches, nothing is known while the LISTEN connection is down:
//! every outage and reconnect starts a new epoch, which makes every head unknown and
//! wakes every waiting request to look in the database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use uuid::Uuid;

use crate::metric_names::FEED_WAITING;
use crate::reads::change::{Change, Channel, Follower};
use crate::reads::freshness::{Freshness, Ticket, Trust};

/// Beyond this many feeds, those nobody waits on are forgotten before another is added:
/// memory stays bounded whatever the number of workspaces written to.
const MAX_HEADS: usize = 100_000;
/// An epoch no head is ever known in.
const UNKNOWN: u64 = u64::MAX;
/// Most requests one workspace may have waiting (`wait`) at once, over both its feeds.
/// A waiting request holds no database connection but does hold one of the server's
/// connections: without a bound one workspace's long polls could take them all. An
/// integration needs one or two per feed.
pub const WAITING_PER_WORKSPACE: usize = 64;

/// Which feed.
pub type FeedKey = (&'static str, Uuid);

/// A feed's head, known in `epoch` only.
#[derive(Clone, Copy, Debug)]
struct Head {
    newest: i64,
    epoch: u64,
}

/// Every feed's head, shared by every request of a process.
#[derive(Default)]
pub struct FeedHeads {
    heads: Mutex<HashMap<FeedKey, watch::Sender<Head>>>,
    /// Its epoch is what a head is known in.
    freshness: Freshness<()>,
    /// Requests waiting now, per workspace.
    waiting: Mutex<HashMap<Uuid, usize>>,
}

/// A request counted among its workspace's waiting ones until it is dropped (answered,
/// or abandoned by its client).
pub struct Waiting {
    heads: Arc<FeedHeads>,
    key: FeedKey,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiting = self.heads.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = waiting.get_mut(&self.key.1) {
            *count -= 1;
            if *count == 0 {
                waiting.remove(&self.key.1);
            }
        }
        drop(waiting);
        metrics::gauge!(FEED_WAITING, "resource" => self.key.0).decrement(1.0);
    }
}

/// A request's view of one feed's head: wakes when it moves or becomes unknown.
pub struct Watch {
    receiver: watch::Receiver<Head>,
}

impl Watch {
    /// Returns once the head has moved, or become unknown, since this watch was taken
    /// or last returned.
    pub async fn changed(&mut self) {
        if self.receiver.changed().await.is_err() {
            // The sender stays in the map while a receiver lives; were it gone, nothing
            // could wake this watch, and the request's deadline ends its wait.
            std::future::pending::<()>().await;
        }
    }
}

impl Watch {
    /// Whether the head has moved, or become unknown, since this watch was taken.
    fn moved(&self) -> bool {
        self.receiver.has_changed().unwrap_or(true)
    }
}

impl Follower for FeedHeads {
    fn channel(&self) -> Channel {
        Channel::ReadModel
    }

    fn changed(&self, change: &Change) {
        match *change {
            Change::Rows { workspace_id, resource, position: Some(position) } => {
                self.raise((resource, workspace_id), self.freshness.epoch(), position);
            }
            // Rows deleted: the head cannot say what is left. Unknown until a query says.
            Change::Rows { workspace_id, resource, position: None } => {
                self.update((resource, workspace_id), false, |head| head.epoch = UNKNOWN);
            }
            // A truncate, or a payload of another version: nothing is known any more.
            Change::AnyRows => self.forget_everything(),
            Change::Key(_) | Change::AnyKey => {}
        }
    }

    fn forget_everything(&self) {
        let heads = self.lock();
        self.freshness.everything_changed(|| {
            for head in heads.values() {
                // Wakes the feed's waiting requests, which then look in the database.
                head.send_modify(|_| {});
            }
        });
    }

    fn trust(&self) -> &Trust {
        self.freshness.trust()
    }
}

impl FeedHeads {
    /// The newest transaction of `key`'s feed, when known.
    pub fn known(&self, key: FeedKey) -> Option<i64> {
        if !self.freshness.trusted() {
            return None;
        }
        let epoch = self.current_epoch();
        let heads = self.lock();
        let head = *heads.get(&key)?.borrow();
        (head.epoch == epoch).then_some(head.newest)
    }

    /// Taken before a query whose answer may be [`FeedHeads::learn`]ed. A head is known
    /// per epoch (a change raises it rather than evicting it), so no key is looked up.
    pub fn ticket(&self) -> Ticket {
        self.freshness.epoch_ticket()
    }

    /// Records that a query begun at `ticket` found every committed change of `key`'s
    /// feed at or below `newest`, unless the listener was down meanwhile.
    pub fn learn(&self, key: FeedKey, ticket: Ticket, newest: i64) {
        if self.freshness.trusted_since(ticket) {
            self.raise(key, ticket.epoch(), newest);
        }
    }

    /// Whether what a read begun at `ticket`, with `watch` taken before it, found is
    /// still what a read would find now: the listener has been up throughout and no change
    /// of the watched feed has been announced since.
    pub fn unchanged_since(&self, ticket: Ticket, watch: &Watch) -> bool {
        self.freshness.trusted_since(ticket) && !watch.moved()
    }

    /// Makes `key`'s head known in `epoch` and at least `newest`: a head of an earlier
    /// epoch says nothing, so it is replaced rather than raised.
    ///
    /// Only a head that moves wakes the feed's watches: a query that learnt what was known
    /// already must not wake every request waiting on the feed, each of which would look
    /// again and learn it again.
    fn raise(&self, key: FeedKey, epoch: u64, newest: i64) {
        let mut heads = self.lock();
        if let Some(head) = heads.get(&key) {
            head.send_if_modified(|head| {
                if head.epoch != epoch {
                    *head = Head { newest, epoch };
                    true
                } else if newest > head.newest {
                    head.newest = newest;
                    true
                } else {
                    false
                }
            });
            return;
        }
        make_room(&mut heads);
        heads.insert(key, watch::Sender::new(Head { newest, epoch }));
    }

    /// A watch on `key`'s head, to take before looking for changes so that none
    /// committed after the look is missed.
    pub fn watch(&self, key: FeedKey) -> Watch {
        let mut heads = self.lock();
        if let Some(head) = heads.get(&key) {
            return Watch { receiver: head.subscribe() };
        }
        make_room(&mut heads);
        let (sender, receiver) = watch::channel(Head { newest: 0, epoch: UNKNOWN });
        heads.insert(key, sender);
        Watch { receiver }
    }

    /// Counts a request of `key`'s feed as waiting, unless its workspace has
    /// [`WAITING_PER_WORKSPACE`] waiting already.
    pub fn start_waiting(self: &Arc<Self>, key: FeedKey) -> Option<Waiting> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let count = waiting.entry(key.1).or_insert(0);
        if *count >= WAITING_PER_WORKSPACE {
            return None;
        }
        *count += 1;
        drop(waiting);
        metrics::gauge!(FEED_WAITING, "resource" => key.0).increment(1.0);
        Some(Waiting { heads: self.clone(), key })
    }

    /// Feeds tracked now.
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    /// Changes `key`'s head with `change`; adds it first if `add` and it is not there.
    fn update(&self, key: FeedKey, add: bool, change: impl FnOnce(&mut Head)) {
        let mut heads = self.lock();
        if let Some(head) = heads.get(&key) {
            head.send_modify(change);
            return;
        }
        if add {
            make_room(&mut heads);
            let mut head = Head { newest: 0, epoch: UNKNOWN };
            change(&mut head);
            heads.insert(key, watch::Sender::new(head));
        }
    }

    fn current_epoch(&self) -> u64 {
        self.freshness.epoch()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FeedKey, watch::Sender<Head>>> {
        // Every change is one insert or one send: a poisoned lock holds a consistent map.
        self.heads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Forgets the heads nobody waits on once the map is full.
fn make_room(heads: &mut HashMap<FeedKey, watch::Sender<Head>>) {
    if heads.len() >= MAX_HEADS {
        heads.retain(|_, head| head.receiver_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening() -> FeedHeads {
        let heads = FeedHeads::default();
        heads.reset(true);
        heads
    }

    /// What the listener does with a notification of `payload`.
    fn announce(heads: &FeedHeads, payload: &str) {
        let change = Change::parse(crate::reads::change::READ_MODEL_CHANNEL, payload);
        heads.changed(&change.expect("the read model's channel"));
    }

    #[test]
    fn a_notified_transaction_is_the_known_head_and_only_grows() {
        let heads = listening();
        let workspace = Uuid::new_v4();
        announce(&heads, &format!("{workspace} contacts 7"));
        assert_eq!(heads.known(("contacts", workspace)), Some(7));
        announce(&heads, &format!("{workspace} contacts 5"));
        assert_eq!(heads.known(("contacts", workspace)), Some(7));
        assert_eq!(heads.known(("items", workspace)), None, "another table's feed");
        assert_eq!(heads.known(("contacts", Uuid::new_v4())), None, "another workspace's feed");
    }

    #[test]
    fn nothing_is_known_while_the_listener_is_down_nor_learned_across_an_outage() {
        let heads = listening();
        let workspace = Uuid::new_v4();
        let ticket = heads.ticket();
        heads.reset(false);
        heads.reset(true);
        heads.learn(("contacts", workspace), ticket, 3);
        assert_eq!(heads.known(("contacts", workspace)), None, "learned from a query that spanned an outage");
        announce(&heads, &format!("{workspace} contacts 4"));
        heads.reset(false);
        assert_eq!(heads.known(("contacts", workspace)), None, "known while the listener is down");
    }

    #[test]
    fn a_delete_or_a_truncate_makes_the_head_unknown() {
        let heads = listening();
        let workspace = Uuid::new_v4();
        announce(&heads, &format!("{workspace} items 9"));
        announce(&heads, &format!("{workspace} items"));
        assert_eq!(heads.known(("items", workspace)), None);
        announce(&heads, &format!("{workspace} items 10"));
        announce(&heads, "*");
        assert_eq!(heads.known(("items", workspace)), None);
    }

    #[test]
    fn a_workspace_has_at_most_its_share_of_waiting_requests_and_gets_them_back() {
        let heads = Arc::new(listening());
        let (workspace, other) = (Uuid::new_v4(), Uuid::new_v4());
        let held: Vec<Waiting> =
            (0..WAITING_PER_WORKSPACE).filter_map(|_| heads.start_waiting(("contacts", workspace))).collect();
        assert_eq!(held.len(), WAITING_PER_WORKSPACE);
        assert!(heads.start_waiting(("items", workspace)).is_none(), "over both feeds of the workspace");
        assert!(heads.start_waiting(("contacts", other)).is_some(), "another workspace is not held back");
        drop(held);
        assert!(heads.start_waiting(("contacts", workspace)).is_some(), "answered requests give their place back");
    }

    #[tokio::test]
    async fn a_watch_wakes_on_its_own_feed_only() {
        let heads = listening();
        let (workspace, other) = (Uuid::new_v4(), Uuid::new_v4());
        let mut watch = heads.watch(("contacts", workspace));
        announce(&heads, &format!("{other} contacts 1"));
        announce(&heads, &format!("{workspace} items 1"));
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), watch.changed()).await;
        assert!(woke.is_err(), "woken by another feed");
        announce(&heads, &format!("{workspace} contacts 1"));
        let woke = tokio::time::timeout(std::time::Duration::from_secs(1), watch.changed()).await;
        assert!(woke.is_ok(), "not woken by its own feed");
    }
}
