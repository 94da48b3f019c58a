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

use lectern_api::keys::Scope;
use lectern_tests::app::urlencode;
use lectern_tests::forwarder::Forwarder;
use lectern_tests::nats::TestNats;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::projector::RunningProjector;
use lectern_tests::TestApp;
use uuid::Uuid;

use crate::mirror::{all_acknowledged, listing, pool, publish_versions, replayed, Mirror, CONVERGES_WITHIN};

/// A primary and its standby behind one address (a forwarder), with the projector and the
/// API reaching the database through it.
struct BehindOneAddress {
    old_primary: TestPostgres,
    standby: TestPostgres,
    address: Forwarder,
    _nats: TestNats,
    client: async_nats::Client,
    projector: RunningProjector,
    app: TestApp,
}

impl BehindOneAddress {
    async fn start() -> Self {
        let old_primary = TestPostgres::start_primary().await;
        lectern_api::reads::create_and_migrate(&old_primary.url()).await.expect("migrate the primary");
        let standby = old_primary.start_standby(None).await;
        let address = Forwarder::start(old_primary.port).await;
        let url = address.url_for("lectern");
        let nats = TestNats::start().await;
        let client = nats.client().await;
        let projector = RunningProjector::start_consuming(&nats.url, pool(&url).await).await;
        let app = TestApp::spawn(pool(&url).await).await;
        Self { old_primary, standby, address, _nats: nats, client, projector, app }
    }
}

/// The rules, with the API never restarted: after a failover and after the old primary
/// comes back behind the same address, (1) feeds keep moving: a new client converges, and
/// a change written afterwards reaches it, a long poll included; (2) a client holding a
/// token from the old primary's own history continues; (3) a client holding a token from
/// the standby that served meanwhile is told to start over, and converges from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_old_primary_comes_back_behind_the_same_address_feeds_keep_moving_without_a_restart() {
    let BehindOneAddress { mut old_primary, mut standby, address, _nats, client, projector, app } =
        BehindOneAddress::start().await;
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

/// The rule: a token of an earlier history that a look finds nothing past is handed back as
/// it came (its history, position and WAL position), whether the answer comes from the
/// process's memory of the feed or from the database; so when the database goes back to
/// that history (the old primary behind the same address again), its client continues.
/// Before, an empty poll while the promoted standby served moved the token to the
/// standby's history, of which the client had been served nothing, and the old primary's
/// return then told that client to start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_up_token_of_the_old_primary_is_handed_back_as_it_came_and_continues_when_it_returns() {
    let BehindOneAddress { mut old_primary, mut standby, address, _nats, client, projector, app } =
        BehindOneAddress::start().await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;

    let first: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &first, 1).await;
    all_acknowledged(&client).await;
    // Contacts: answered from memory once the process knows the feed's head. Items (none
    // published): the process never learns that feed's head, so it is read each time.
    let mut contacts = Mirror::default();
    assert!(contacts.converges_to_the_listing(&app, &key).await, "the contacts feed on the old primary");
    let mut items = Mirror::of("items");
    assert!(items.converges_to_the_listing(&app, &key).await, "the items feed on the old primary");

    // A failover that lost nothing; then clients syncing from scratch make the process read
    // the contacts feed, and learn its head, in the promoted standby's history.
    let state = app.state.as_ref().expect("the app's state");
    let old_history = state.history.current();
    replayed(&old_primary, &standby).await;
    old_primary.stop().await;
    standby.promote().await;
    address.point_at(standby.port);
    let deadline = tokio::time::Instant::now() + CONVERGES_WITHIN;
    let on_the_standby = loop {
        let mut fresh = Mirror::default();
        fresh.follow(&app, &key).await;
        if state.history.current() != old_history && state.feeds.heads.known(("contacts", workspace)).is_some() {
            break fresh;
        }
        assert!(tokio::time::Instant::now() < deadline, "the process never learnt the feed in the standby's history");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(on_the_standby.records.len(), 20);

    for mirror in [&contacts, &items] {
        let token = mirror.token.clone().expect("a token");
        for _ in 0..3 {
            let feed = format!("/v1/{}/changes?since={}", mirror.resource(), urlencode(&token));
            let reply = app.get(&key, &feed).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            assert!(reply.data().is_empty(), "nothing was written since: {}", reply.text);
            assert_eq!(
                reply.body["syncToken"].as_str(),
                Some(token.as_str()),
                "an empty poll of the {} feed moved the old primary's token into the standby's history",
                mirror.resource()
            );
        }
    }

    // The old primary comes back behind the same address; the standby is gone.
    standby.stop().await;
    old_primary.start().await;
    address.point_at(old_primary.port);
    let second: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    publish_versions(&client, workspace, &second, 1).await;
    all_acknowledged(&client).await;
    for mirror in [&mut contacts, &mut items] {
        if let Err(reply) = mirror.try_follow(&app, &key).await {
            panic!("a client of the old primary's history was refused on its return: {}", reply.text);
        }
        assert!(mirror.converges_to_the_listing(&app, &key).await, "the {} feed did not converge", mirror.resource());
    }
    assert_eq!(contacts.records.len(), 25);
    let stale = on_the_standby.token.clone().expect("a token");
    let reply = app.get(&key, &format!("/v1/contacts/changes?since={}", urlencode(&stale))).await;
    assert_eq!(reply.body["error"]["details"]["startOver"], true, "the standby's token: {}", reply.text);
    projector.stop().await;
}
