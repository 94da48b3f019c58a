//! Records and keys, written as the projector (its batches) and `keys create` write them.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, TimeZone, Utc};
use lectern_api::keys::store::{self, NewKey};
use lectern_api::keys::{Environment, IssuedKey, Pepper, Scope};
use lectern_read_model::{contacts, Commit, Key, Status};
use lectern_schema::contact::ContactData;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use uuid::Uuid;

/// The pepper every [`crate::TestApp`] uses unless a test says otherwise.
pub const TEST_PEPPER: &str = "lectern test pepper; not a real secret";

/// [`TEST_PEPPER`] as the API holds it.
pub fn test_pepper() -> Pepper {
    Pepper::new(SecretString::from(TEST_PEPPER.to_owned()))
}

/// A key made and stored the way `keys create` does; returns (key id, full key).
pub async fn create_key(pool: &PgPool, workspace_id: Uuid, scopes: &[Scope]) -> (String, String) {
    create_key_with(pool, workspace_id, scopes, Environment::Live, None).await
}

pub async fn create_key_with(
    pool: &PgPool,
    workspace_id: Uuid,
    scopes: &[Scope],
    environment: Environment,
    expires_at: Option<DateTime<Utc>>,
) -> (String, String) {
    let issued = IssuedKey::generate(environment, &test_pepper());
    let new = NewKey { workspace_id, name: Some("test"), scopes, expires_at };
    store::insert(pool, &issued, &new).await.expect("insert key");
    (issued.key_id.clone(), issued.key.expose_secret().to_owned())
}

/// A contact row; `ContactSeed::named("x")` gives a complete active contact.
#[derive(Clone, Debug)]
pub struct ContactSeed {
    pub id: Uuid,
    pub name: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub address: Option<String>,
    pub tin: Option<String>,
    pub is_customer: bool,
    pub is_supplier: bool,
    pub created_at: DateTime<Utc>,
    pub status: &'static str,
}

impl ContactSeed {
    pub fn named(name: &str) -> Self {
        Self {
            id: Uuid::new_v4(),
            name: name.to_owned(),
            email: None,
            phone: None,
            address: None,
            tin: None,
            is_customer: true,
            is_supplier: false,
            created_at: base_time(),
            status: "active",
        }
    }

    /// Created `seconds` after a fixed base instant, so orders are predictable.
    pub fn at(mut self, seconds: i64) -> Self {
        self.created_at = base_time() + Duration::seconds(seconds);
        self
    }

    pub fn status(mut self, status: &'static str) -> Self {
        self.status = status;
        self
    }

    pub fn roles(mut self, is_customer: bool, is_supplier: bool) -> Self {
        self.is_customer = is_customer;
        self.is_supplier = is_supplier;
        self
    }

    pub fn email(mut self, email: &str) -> Self {
        self.email = Some(email.to_owned());
        self
    }

    pub fn phone(mut self, phone: &str) -> Self {
        self.phone = Some(phone.to_owned());
        self
    }

    pub fn tin(mut self, tin: &str) -> Self {
        self.tin = Some(tin.to_owned());
        self
    }

    pub fn address(mut self, address: &str) -> Self {
        self.address = Some(address.to_owned());
        self
    }

    /// Writes the row through the projector's own batch, as a newer version of it when
    /// the id exists.
    pub async fn insert(&self, pool: &PgPool, workspace_id: Uuid) -> Uuid {
        self.write(pool, workspace_id, Commit::WithTheTransaction).await
    }

    /// [`ContactSeed::insert`], committed as `commit` says (as the projector commits:
    /// [`Commit::OnItsOwnBeforeFlush`]).
    pub async fn write(&self, pool: &PgPool, workspace_id: Uuid, commit: Commit) -> Uuid {
        let mut connection = pool.acquire().await.expect("a connection to seed with");
        self.batch(workspace_id).write(&mut connection, commit).await.expect("insert contact");
        self.id
    }

    /// [`ContactSeed::insert`] inside the caller's open transaction on `connection`.
    pub async fn write_in(&self, connection: &mut sqlx::PgConnection, workspace_id: Uuid) -> Uuid {
        self.batch(workspace_id).write(connection, Commit::WithTheTransaction).await.expect("insert contact");
        self.id
    }

    fn batch(&self, workspace_id: Uuid) -> contacts::Batch {
        let mut data = ContactData::new(self.name.clone(), self.created_at.into());
        data.email.clone_from(&self.email);
        data.phone.clone_from(&self.phone);
        data.address.clone_from(&self.address);
        data.tin.clone_from(&self.tin);
        data.is_customer = self.is_customer;
        data.is_supplier = self.is_supplier;
        let mut batch = contacts::Batch::default();
        batch.push(seed_key(workspace_id, self.id, self.status), Some(&data));
        batch
    }
}

/// The key of a seeded row: a version above every earlier seed's, since the batch keeps
/// the highest version (also across test processes: it starts from the clock), and
/// `status` as tests name it. A seeded archived or deleted row keeps its data, unlike
/// the projector's tombstones, so that a test proves the status alone hides it.
pub fn seed_key(workspace_id: Uuid, id: Uuid, status: &str) -> Key {
    static LAST_VERSION: AtomicI64 = AtomicI64::new(0);
    let now = Utc::now().timestamp_micros();
    let previous = LAST_VERSION
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(now.max(last + 1)))
        .unwrap_or_default();
    let status = match status {
        "active" => Status::Active,
        "archived" => Status::Archived,
        "deleted" => Status::Deleted,
        other => panic!("no record status {other:?}"),
    };
    Key { workspace_id, id, version: now.max(previous + 1), status }
}

/// 2025-02-03T08:00:00Z: the base of seeded creation times.
pub fn base_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 2, 3, 8, 0, 0).single().unwrap_or_default()
}

/// Inserts `count` contacts named `prefix 0000`..., one second apart.
pub async fn insert_contacts(pool: &PgPool, workspace_id: Uuid, prefix: &str, count: usize) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(count);
    for index in 0..count {
        let seed = ContactSeed::named(&format!("{prefix} {index:04}")).at(index as i64);
        ids.push(seed.insert(pool, workspace_id).await);
    }
    ids
}
