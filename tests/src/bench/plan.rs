//! How much data, in which workspaces, in which order: 1,000 workspaces per million
//! contacts, one of them holding a fifth of all contacts, the rest about 800 each;
//! items a fifth of the contacts, spread evenly. Records are published in the order
//! they were created, across workspaces, as an upstream replaying its history would.

use uuid::Uuid;

use super::prng::{derived_id, hash};

/// Salts that keep the id streams of workspaces, contacts, items and events apart.
pub const WORKSPACE: u64 = 1;
pub const CONTACT: u64 = 2;
pub const ITEM: u64 = 3;
pub const EVENT: u64 = 4;

const DAY_MS: i64 = 86_400_000;
/// 2024-01-01T00:00:00Z: the first workspace starts then.
const EPOCH_MS: i64 = 1_704_067_200_000;
/// Workspaces start within a year of each other and grow for two years.
const START_SPREAD_DAYS: i64 = 365;
const GROWTH_DAYS: i64 = 730;

#[derive(Clone, Debug)]
pub struct Workspace {
    /// 0 is the big workspace.
    pub number: u32,
    pub id: Uuid,
    pub contacts: u32,
    pub items: u32,
    /// When its first record was created (ms since the epoch).
    pub starts_at: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entity {
    Contact,
    Item,
}

/// One record's `created` event, by position: everything else is derived.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    pub workspace: u32,
    pub entity: Entity,
    pub index: u32,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub workspaces: Vec<Workspace>,
}

impl Plan {
    pub fn new(contacts: usize) -> Self {
        let count = (contacts / 1_000).max(2);
        let big = contacts / 5;
        let (small_each, small_extra) = ((contacts - big) / (count - 1), (contacts - big) % (count - 1));
        let items = contacts / 5;
        let (items_each, items_extra) = (items / count, items % count);
        let workspaces = (0..count)
            .map(|number| {
                let contacts = if number == 0 { big } else { small_each + usize::from(number <= small_extra) };
                let number = number as u32;
                Workspace {
                    number,
                    id: derived_id(&[WORKSPACE, u64::from(number)]),
                    contacts: contacts as u32,
                    items: (items_each + usize::from((number as usize) < items_extra)) as u32,
                    starts_at: EPOCH_MS
                        + (hash(&[WORKSPACE, u64::from(number), 1]) % (START_SPREAD_DAYS * DAY_MS) as u64) as i64,
                }
            })
            .collect();
        Self { workspaces }
    }

    pub fn big(&self) -> &Workspace {
        &self.workspaces[0]
    }

    pub fn small(&self) -> &[Workspace] {
        &self.workspaces[1..]
    }

    pub fn contacts(&self) -> u64 {
        self.workspaces.iter().map(|workspace| u64::from(workspace.contacts)).sum()
    }

    pub fn items(&self) -> u64 {
        self.workspaces.iter().map(|workspace| u64::from(workspace.items)).sum()
    }

    /// Every record once, in the order of its `created` event.
    pub fn creation_order(&self) -> Vec<Record> {
        let mut order: Vec<(i64, Record)> = Vec::with_capacity((self.contacts() + self.items()) as usize);
        for workspace in &self.workspaces {
            for (entity, count) in [(Entity::Contact, workspace.contacts), (Entity::Item, workspace.items)] {
                for index in 0..count {
                    let record = Record { workspace: workspace.number, entity, index };
                    order.push((self.created_at(record), record));
                }
            }
        }
        order.sort_by_key(|(at, record)| (*at, record.workspace, record.index));
        order.into_iter().map(|(_, record)| record).collect()
    }

    /// When `record` was created: evenly over its workspace's two years, in index order.
    pub fn created_at(&self, record: Record) -> i64 {
        let workspace = &self.workspaces[record.workspace as usize];
        let count = match record.entity {
            Entity::Contact => workspace.contacts,
            Entity::Item => workspace.items,
        };
        let step = (GROWTH_DAYS * DAY_MS) / i64::from(count.max(1));
        let jitter = (hash(&[salt(record.entity), u64::from(record.workspace), u64::from(record.index)])
            % step.max(1) as u64) as i64;
        workspace.starts_at + i64::from(record.index) * step + jitter
    }

    pub fn record_id(&self, record: Record) -> Uuid {
        derived_id(&[salt(record.entity), u64::from(record.workspace), u64::from(record.index)])
    }
}

pub fn salt(entity: Entity) -> u64 {
    match entity {
        Entity::Contact => CONTACT,
        Entity::Item => ITEM,
    }
}
