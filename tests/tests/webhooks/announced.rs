//! What the deliveries a receiver got announced, as the delivery log records it: how far
//! into a feed, for which workspace and resource.

use std::time::{Duration, Instant};

use lectern_tests::webhooks::{Delivery, Receiver};
use sqlx::PgPool;
use uuid::Uuid;

/// The newest feed position of `resource` (`contacts` or `items`) in `workspace`.
pub async fn newest_position(pool: &PgPool, resource: &str, workspace: Uuid) -> i64 {
    sqlx::query_scalar(&format!("select coalesce(max(change_xid), 0) from {resource} where workspace_id = $1"))
        .bind(workspace)
        .fetch_one(pool)
        .await
        .expect("read the feed's newest position")
}

/// The furthest feed position of `resource` that a delivery this receiver was sent and
/// answered 2xx announced, as the delivery log records it (0 when none).
pub async fn announced_to(pool: &PgPool, resource: &str, deliveries: &[Delivery]) -> i64 {
    let ids: Vec<String> = deliveries.iter().map(|delivery| delivery.id().to_owned()).collect();
    sqlx::query_scalar(
        "select coalesce(max(through), 0) from webhook_deliveries \
         where state = 'delivered' and resource = $1 and id = any($2)",
    )
    .bind(resource)
    .bind(&ids)
    .fetch_one(pool)
    .await
    .expect("read the delivery log")
}

/// Waits until a delivery the receiver got announced every change of `resource` in
/// `workspace` committed so far (every change is announced, however they coalesce), or
/// panics after `within`. Returns the deliveries then.
pub async fn wait_until_announced(
    receiver: &Receiver,
    pool: &PgPool,
    resource: &str,
    workspace: Uuid,
    within: Duration,
) -> Vec<Delivery> {
    let newest = newest_position(pool, resource, workspace).await;
    let deadline = Instant::now() + within;
    loop {
        let deliveries = receiver.deliveries();
        let announced = announced_to(pool, resource, &deliveries).await;
        if announced >= newest {
            return deliveries;
        }
        assert!(
            Instant::now() < deadline,
            "the {resource} of workspace {workspace} up to position {newest} were not announced within {within:?} \
             (announced through {announced}); deliveries: {deliveries:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Fails, naming `what`, unless `endpoint` has announced every change of `resource` in
/// `workspace` committed so far: its mark in `webhook_announced` is at the feed's newest
/// position or past it.
pub async fn assert_announced_everything(pool: &PgPool, endpoint: Uuid, resource: &str, workspace: Uuid, what: &str) {
    let (head, through): (i64, i64) = sqlx::query_as(&format!(
        "select (select max(change_xid) from {resource} where workspace_id = $1), \
                (select through from webhook_announced where endpoint_id = $2 and resource = $3)"
    ))
    .bind(workspace)
    .bind(endpoint)
    .bind(resource)
    .fetch_one(pool)
    .await
    .expect("read what was announced");
    assert!(through >= head, "{what} was not announced: through {through} < {head}");
}

/// Deliveries whose body names `workspace` and `resource`.
pub fn of(deliveries: &[Delivery], workspace: Uuid, resource: &str) -> Vec<Delivery> {
    deliveries
        .iter()
        .filter(|delivery| {
            let body = delivery.json();
            body["data"]["workspaceId"] == workspace.to_string() && body["data"]["resource"] == resource
        })
        .cloned()
        .collect()
}
