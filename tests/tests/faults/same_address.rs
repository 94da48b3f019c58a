//! A database that changes under the same address: the API and the projector reach
//! PostgreSQL through a TCP forwarder standing for a DNS name, a virtual IP or a proxy
//! (how managed PostgreSQL is reached), and nothing is restarted or re-pointed. A failover
//! to a standby is the forwarder pointed at the promoted standby; the old primary coming
//! back is the forwarder pointed at it again, with its lower positions.
//!
//! Before the API noticed a change of history, it kept the standby's bound (the highest it
//! had sampled) once the old primary was back: every page was read below it and handed out
//! a token at it, so nothing written afterwards ever reached a feed client, new ones
//! included, until a restart.

use std::time::Duration;

use lectern_tests::app::urlencode;
use lectern_tests::forwarder::Forwarder;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::RunningProjector;
use lectern_tests::TestApp;
use uuid::Uuid;

use crate::mirror::{all_acknowledged, listing, pool, publish_versions, replayed, Mirror};

/// The rules, with the API never restarted: after a failover and after the old primary
/// comes back behind the same address, (1) feeds keep moving: a new client converges, and
/// a change written afterwards reaches it, a long poll included; (2) a client holding a
/// token from the old primary's own history continues; (3) a client holding a token from
/// the standby that served meanwhile is told to start over, and converges from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_old_primary_comes_back_behind_the_same_address_feeds_keep_moving_without_a_restart() {
    let mut old_primary = TestPostgres::start_primary().await;
    lectern_api::reads::create_and_migrate(&old_primary.url()).await.expect("migrate the primary");
    let mut standby = old_primary.start_standby(None).await;
    let address = Forwarder::start(old_primary.port).await;
    let url = address.url_for("lectern");
    let nats = TestNats::start().await;
    let client = nats.client().await;
    let projector = RunningProjector::start_consuming(&nats.url, pool(&url).await).await;
    let app = TestApp::spawn(pool(&url).await).await;
    let (workspace, key) = app.workspace_with_key().await;

    let first: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 1).await;
    all_acknowledged(&client).await;
    let mut from_the_old_primary = Mirror::default();
    assert!(from_the_old_primary.converges_to_the_listing(&app, &key).await, "the feed on the old primary");

    // A failover: the standby is promoted and the address moves to it.
    replayed(&old_primary, &standby).await;
    old_primary.stop().await;
    standby.promote().await;
    address.point_at(standby.port);
    let second: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &second, 1).await;
    all_acknowledged(&client).await;
    let mut from_the_standby = Mirror::default();
    assert!(from_the_standby.converges_to_the_listing(&app, &key).await, "the feed on the promoted standby");
    assert_eq!(from_the_standby.records.len(), 30);

    // The old primary comes back behind the same address; the standby is gone.
    standby.stop().await;
    old_primary.start().await;
    address.point_at(old_primary.port);
    let third: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &third, 1).await;
    all_acknowledged(&client).await;

    let mut new_client = Mirror::default();
    assert!(new_client.converges_to_the_listing(&app, &key).await, "a new client on the old primary");
    let fourth: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let token = new_client.token.clone().expect("a token");
    let long_poll = tokio::spawn({
        let request = app
            .http
            .get(app.url(&format!("/v1/contacts/changes?since={}&wait=20", urlencode(&token))))
            .header("X-API-Key", &key);
        async move { lectern_tests::Reply::read(request.send().await.expect("the long poll")).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    publish_versions(&client, workspace, &fourth, 1).await;
    let woken = long_poll.await.expect("the long poll");
    assert_eq!(woken.status, 200, "{}", woken.text);
    assert!(!woken.data().is_empty(), "a long poll on the old primary was never told of a change: {}", woken.text);
    all_acknowledged(&client).await;
    assert!(
        new_client.converges_to_the_listing(&app, &key).await,
        "what was written after the old primary came back never reached the feed: {} mirrored, {} listed",
        new_client.records.len(),
        listing(&app, &key).await.len()
    );
    assert!(
        from_the_old_primary.converges_to_the_listing(&app, &key).await,
        "the client of the old primary's history did not converge"
    );

    let stale = from_the_standby.token.clone().expect("a token");
    let reply = app.get(&key, &format!("/v1/contacts/changes?since={}", urlencode(&stale))).await;
    assert_eq!(reply.status, 400, "a token from the standby the database went back from was served: {}", reply.text);
    assert_eq!(reply.body["error"]["details"]["startOver"], true, "{}", reply.text);
    let mut started_over = Mirror::default();
    assert!(started_over.converges_to_the_listing(&app, &key).await, "starting over on the old primary");
    projector.stop().await;
}
