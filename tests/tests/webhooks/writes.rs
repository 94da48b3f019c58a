//! Writes of contacts and items as the projector makes them, each committed in a
//! transaction of its own or a batch to a transaction, so the feed and the webhooks see
//! what they would see in production.

use lectern_read_model::{items, Commit};
use lectern_schema::events::ItemType;
use lectern_schema::item::ItemData;
use lectern_tests::seed::{base_time, seed_key, ContactSeed};
use sqlx::PgPool;
use uuid::Uuid;

/// Writes `count` new contacts to `workspace`, `per_transaction` to a transaction (the
/// projector commits a batch as one); returns their ids.
pub async fn write_contacts(
    pool: &PgPool,
    workspace: Uuid,
    prefix: &str,
    count: usize,
    per_transaction: usize,
) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(per_transaction.max(1)) {
        let mut transaction = pool.begin().await.expect("begin a write");
        for index in chunk {
            let seed = ContactSeed::named(&format!("{prefix} {index:04}"));
            ids.push(seed.write_in(&mut transaction, workspace).await);
        }
        transaction.commit().await.expect("commit a write");
    }
    ids
}

/// One contact written (or written again, a newer version, when `id` exists) in its own
/// transaction.
pub async fn write_contact(pool: &PgPool, workspace: Uuid, id: Uuid, name: &str) {
    let mut seed = ContactSeed::named(name);
    seed.id = id;
    seed.insert(pool, workspace).await;
}

/// An active service item, committed on its own; returns its id.
pub async fn write_item(pool: &PgPool, workspace: Uuid, name: &str) -> Uuid {
    let id = Uuid::new_v4();
    let data = ItemData::new(name.to_owned(), ItemType::Service, base_time().into());
    let mut batch = items::Batch::default();
    batch.push(seed_key(workspace, id, "active"), Some(&data));
    let mut connection = pool.acquire().await.expect("a connection to write with");
    batch.write(&mut connection, Commit::WithTheTransaction).await.expect("write an item");
    id
}
