//! Each workspace's share of the listing connections.
//!
//! Listings and searches of every workspace borrow from one set of connections. A
//! search that no index serves (a rare one- or two-letter term in a large workspace)
//! reads the workspace's whole range of the order index, and a hundred of those at once
//! from one key would hold every connection: another workspace's requests then waited
//! for the acquire timeout and got 503s. So one workspace runs at most
//! `share` statements at once; its further requests wait, as long as a request waits
//! for a connection, and are then refused with a 429 of their own, while every other
//! workspace finds connections free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

/// A workspace had its whole share of connections for as long as a request may wait.
#[derive(Debug, thiserror::Error)]
#[error("the workspace already runs {share} statements at once (its share of the connections)")]
pub struct ShareExhausted {
    pub share: usize,
}

/// Every workspace's statements in flight, capped at `share` each.
#[derive(Debug)]
pub struct WorkspaceShares {
    share: usize,
    /// Only workspaces with statements in flight or waiting have an entry.
    running: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
}

impl WorkspaceShares {
    pub fn new(share: usize) -> Arc<Self> {
        Arc::new(Self { share: share.max(1), running: Mutex::default() })
    }

    pub fn share(&self) -> usize {
        self.share
    }

    /// One of `workspace_id`'s places, waiting at most `wait` for one.
    pub async fn enter(self: &Arc<Self>, workspace_id: Uuid, wait: Duration) -> Result<WorkspaceShare, ShareExhausted> {
        let places = self.lock().entry(workspace_id).or_insert_with(|| Arc::new(Semaphore::new(self.share))).clone();
        let acquired = tokio::time::timeout(wait, places.acquire_owned()).await;
        match acquired {
            Ok(Ok(permit)) => Ok(WorkspaceShare { workspace_id, permit: Some(permit), shares: self.clone() }),
            // Never closed; a timeout is the only way out here.
            Ok(Err(_)) | Err(_) => {
                self.forget_if_unused(workspace_id);
                Err(ShareExhausted { share: self.share })
            }
        }
    }

    /// Drops the workspace's entry once nothing holds or waits for it.
    fn forget_if_unused(&self, workspace_id: Uuid) {
        let mut running = self.lock();
        // The map's own reference is the only one left: no place held, no waiter.
        if running.get(&workspace_id).is_some_and(|places| Arc::strong_count(places) == 1) {
            running.remove(&workspace_id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Arc<Semaphore>>> {
        // Inserts and removals only: a poisoned lock still holds a consistent map.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Workspaces with statements in flight or waiting, for tests of the map's upkeep.
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }
}

/// One statement's place in its workspace's share; given back when dropped.
#[derive(Debug)]
pub struct WorkspaceShare {
    workspace_id: Uuid,
    permit: Option<OwnedSemaphorePermit>,
    shares: Arc<WorkspaceShares>,
}

impl Drop for WorkspaceShare {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.shares.forget_if_unused(self.workspace_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_workspace_gets_its_share_and_no_more_while_another_workspace_still_gets_in() {
        let shares = WorkspaceShares::new(2);
        let (busy, quiet) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let first = shares.enter(busy, WAIT).await.unwrap();
        let _second = shares.enter(busy, WAIT).await.unwrap();

        assert!(shares.enter(busy, WAIT).await.is_err(), "a third statement of a share of two got in");
        assert!(shares.enter(quiet, WAIT).await.is_ok(), "another workspace was held up");

        drop(first);
        assert!(shares.enter(busy, WAIT).await.is_ok(), "a place given back was not reused");
    }

    #[tokio::test]
    async fn a_workspace_with_nothing_in_flight_leaves_no_entry_behind() {
        let shares = WorkspaceShares::new(1);
        let held = shares.enter(Uuid::from_u128(1), WAIT).await.unwrap();
        let _ = shares.enter(Uuid::from_u128(1), WAIT).await;
        assert_eq!(shares.tracked(), 1);
        drop(held);
        assert_eq!(shares.tracked(), 0, "an idle workspace kept its entry");
    }
}
