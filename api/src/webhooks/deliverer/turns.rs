//! Turns on the deliverer's connections, handed out round-robin by workspace. A write in a
//! workspace with thousands of endpoints wakes thousands of looks at once; queued on the
//! pool in arrival order, another workspace's look waited behind all of them (11.9 s with
//! 2,000 endpoints). Here each workspace waits in a line of its own and a freed turn goes to
//! the next workspace in the ring, so another workspace's look waits for at most one turn
//! of each busy workspace, not for their whole waves.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use uuid::Uuid;

/// As many turns as the deliverer has connections, so that a holder never waits on the pool.
pub struct Turns {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: usize,
    /// Workspaces with someone waiting, in the order their next turn comes.
    ring: VecDeque<Uuid>,
    waiting: HashMap<Uuid, VecDeque<oneshot::Sender<Turn>>>,
}

/// A turn held: the connections' use it stands for ends when it is dropped, and the turn
/// goes to the next workspace waiting.
pub struct Turn {
    /// `None` once disarmed: a turn handed to nobody is not given back twice.
    turns: Option<Arc<Turns>>,
}

impl Turns {
    pub fn new(count: usize) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State { free: count, ..State::default() }) })
    }

    /// A turn for a look (or a record) of `workspace`'s endpoint: at once when one is free
    /// and nobody waits, else when the ring comes round to `workspace`.
    pub async fn take(self: &Arc<Self>, workspace: Uuid) -> Turn {
        let handed = {
            let mut state = self.lock();
            if state.free > 0 && state.ring.is_empty() {
                state.free -= 1;
                return Turn { turns: Some(self.clone()) };
            }
            let (hand, handed) = oneshot::channel();
            let state = &mut *state;
            let line = state.waiting.entry(workspace).or_default();
            if line.is_empty() {
                state.ring.push_back(workspace);
            }
            line.push_back(hand);
            handed
        };
        // The sender lives in the state until it hands a turn, and the state lives with
        // `self`: the only way it is dropped unsent is the whole deliverer going away.
        match handed.await {
            Ok(turn) => turn,
            Err(_) => Turn { turns: Some(self.clone()) },
        }
    }

    /// A turn given back: to the next workspace in the ring, or freed.
    fn give_back(self: &Arc<Self>) {
        let mut guard = self.lock();
        let state = &mut *guard;
        while let Some(workspace) = state.ring.pop_front() {
            let Some(line) = state.waiting.get_mut(&workspace) else { continue };
            let mut turn = Turn { turns: Some(self.clone()) };
            while let Some(hand) = line.pop_front() {
                match hand.send(turn) {
                    Ok(()) => {
                        if line.is_empty() {
                            state.waiting.remove(&workspace);
                        } else {
                            state.ring.push_back(workspace);
                        }
                        return;
                    }
                    // Its look was dropped while waiting: the next in its line.
                    Err(unsent) => turn = unsent,
                }
            }
            state.waiting.remove(&workspace);
            // Handed to nobody: dropped without giving it back again (the lock is held).
            turn.turns = None;
        }
        state.free += 1;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(turns) = self.turns.take() {
            turns.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_freed_turn_goes_to_the_next_workspace_in_the_ring_not_to_the_busy_one() {
        let turns = Turns::new(1);
        let (busy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
        let held = turns.take(busy).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for index in 0..5 {
            let (turns, order) = (turns.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = turns.take(busy).await;
                order.lock().unwrap_or_else(PoisonError::into_inner).push(format!("busy {index}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }));
            tokio::task::yield_now().await;
        }
        let quiet_task = {
            let (turns, order) = (turns.clone(), order.clone());
            tokio::spawn(async move {
                let _turn = turns.take(quiet).await;
                order.lock().unwrap_or_else(PoisonError::into_inner).push("quiet".to_owned());
            })
        };
        tokio::task::yield_now().await;
        drop(held);
        for task in waiting {
            task.await.unwrap_or_else(|error| panic!("a waiting look: {error}"));
        }
        quiet_task.await.unwrap_or_else(|error| panic!("the quiet look: {error}"));
        let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert_eq!(order[..2], ["busy 0".to_owned(), "quiet".to_owned()], "{order:?}");
    }

    #[tokio::test]
    async fn a_look_dropped_while_waiting_loses_no_turn() {
        let turns = Turns::new(1);
        let workspace = Uuid::new_v4();
        let held = turns.take(workspace).await;
        let abandoned = tokio::spawn({
            let turns = turns.clone();
            async move {
                let _turn = turns.take(workspace).await;
            }
        });
        tokio::task::yield_now().await;
        abandoned.abort();
        let _ = abandoned.await;
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), turns.take(Uuid::new_v4())).await;
        assert!(again.is_ok(), "the turn was lost with the abandoned look");
    }
}
