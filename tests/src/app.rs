//! The real app over HTTP, and the contract's assertions on what it answers.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use lectern_api::http::{AppSettings, AppState, Application};
use lectern_api::keys::{Environment, Pepper, Scope};
use lectern_api::listing::workspace_sizes::WalkSettings;
use lectern_api::rate_limit::Policy;
use lectern_api::reads::change::Follower;
use lectern_api::reads::PoolSettings;
use lectern_runtime::server::OperationsServer;
use secrecy::SecretString;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::seed::{create_key, TEST_PEPPER};

/// The cursor secret every [`TestApp`] uses.
pub const TEST_CURSOR_SECRET: &str = "lectern test cursor secret; not a real secret";

/// A running app on a free port, its database, and an HTTP client.
pub struct TestApp {
    pub address: SocketAddr,
    pub pool: PgPool,
    pub http: reqwest::Client,
    /// The running app's state, to see what its caches know; `None` for an app in
    /// another process.
    pub state: Option<Arc<AppState>>,
    /// Its operations listener (`/readyz` with details, `/metrics`); `None` for an app in
    /// another process.
    pub operations: Option<SocketAddr>,
}

/// How a [`TestApp`] differs from the defaults.
#[derive(Clone, Debug)]
pub struct AppOptions {
    pub environment: Environment,
    pub cursor_lifetime: Duration,
    /// Sync tokens as the release before histories reads them.
    pub sync_tokens_in_previous_format: bool,
    /// Per-key limit; generous by default so tests that are not about limits never meet one.
    pub per_key: Policy,
    /// Uncached key lookups per client address (every test client is 127.0.0.1).
    pub lookups_per_address: Policy,
    /// When searches walk a workspace.
    pub walks: WalkSettings,
    /// Listing connections one workspace may use at once; `None` for the default
    /// share of the pool, as `serve` has it.
    pub connections_per_workspace: Option<u32>,
    /// Streaming replicas the API reads from (none: the primary serves everything).
    pub replicas: Vec<lectern_api::reads::replicas::ReplicaTarget>,
    /// How far behind a replica may be and still serve.
    pub max_replica_lag: Duration,
    /// What signs cursors and sync tokens ([`TEST_CURSOR_SECRET`] by default).
    pub cursor_secret: String,
    /// Retired cursor secrets whose cursors and tokens still open.
    pub previous_cursor_secrets: Vec<String>,
    /// What key secrets are hashed under ([`TEST_PEPPER`] by default).
    pub pepper: String,
    /// Retired peppers whose keys still authenticate.
    pub previous_peppers: Vec<String>,
    /// How webhooks are delivered: `serve`'s defaults, except that private targets are
    /// allowed (the tests' receivers listen on loopback); webhook tests shorten the waits.
    pub webhooks: lectern_api::webhooks::WebhookSettings,
}

impl AppOptions {
    /// The settings `serve` would build the state from, with the limits of `pool` for
    /// its listing connections.
    fn settings_beside(&self, pool: &PgPool) -> AppSettings {
        let max_connections = pool.options().get_max_connections();
        AppSettings {
            reads: PoolSettings {
                max_connections,
                acquire_timeout: pool.options().get_acquire_timeout(),
                statement_timeout: Duration::from_secs(30),
                connections_per_workspace: self
                    .connections_per_workspace
                    .unwrap_or_else(|| PoolSettings::default_share(max_connections)),
            },
            pepper: Pepper::new(SecretString::from(self.pepper.clone())),
            previous_peppers: self
                .previous_peppers
                .iter()
                .map(|pepper| Pepper::new(SecretString::from(pepper.clone())))
                .collect(),
            environment: self.environment,
            cursor_secret: SecretString::from(self.cursor_secret.clone()),
            previous_cursor_secrets: self.previous_cursor_secrets.iter().cloned().map(SecretString::from).collect(),
            cursor_lifetime: self.cursor_lifetime,
            sync_tokens_in_previous_format: self.sync_tokens_in_previous_format,
            per_key: self.per_key,
            lookups_per_address: self.lookups_per_address,
            walks: self.walks,
            replicas: self.replicas.clone(),
            max_replica_lag: self.max_replica_lag,
            webhooks: self.webhooks,
        }
    }
}

/// A limit no test reaches by accident.
pub fn generous_policy() -> Policy {
    let plenty = NonZeroU32::new(1_000_000).expect("non-zero");
    Policy { per_minute: plenty, burst: plenty }
}

impl Default for AppOptions {
    fn default() -> Self {
        Self {
            environment: Environment::Live,
            cursor_lifetime: Duration::from_secs(86_400),
            sync_tokens_in_previous_format: false,
            per_key: generous_policy(),
            lookups_per_address: generous_policy(),
            walks: WalkSettings::default(),
            connections_per_workspace: None,
            replicas: Vec::new(),
            max_replica_lag: Duration::from_secs(5),
            cursor_secret: TEST_CURSOR_SECRET.to_owned(),
            previous_cursor_secrets: Vec::new(),
            pepper: TEST_PEPPER.to_owned(),
            previous_peppers: Vec::new(),
            // The tests' receivers listen on loopback.
            webhooks: lectern_api::webhooks::WebhookSettings {
                policy: lectern_api::webhooks::TargetPolicy { allow_private: true },
                ..Default::default()
            },
        }
    }
}

impl TestApp {
    pub async fn spawn(pool: PgPool) -> Self {
        Self::spawn_with(pool, AppOptions::default()).await
    }

    pub async fn spawn_with(pool: PgPool, options: AppOptions) -> Self {
        let (app, caches) = Self::start(pool, options, std::future::pending()).await;
        wait_until_trusted(&caches).await;
        app
    }

    /// An app that begins its shutdown when the sender is used (or dropped).
    pub async fn spawn_stoppable(pool: PgPool) -> (Self, tokio::sync::oneshot::Sender<()>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let (app, caches) = Self::start(pool, AppOptions::default(), shutdown).await;
        wait_until_trusted(&caches).await;
        (app, stop)
    }

    /// An app whose database may be unreachable: it does not wait for its change
    /// listener, so its caches may stay untrusted.
    pub async fn spawn_without_database(pool: PgPool) -> Self {
        Self::start(pool, AppOptions::default(), std::future::pending()).await.0
    }

    async fn start(
        pool: PgPool,
        options: AppOptions,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> (Self, [Arc<dyn Follower>; 4]) {
        // Quiet by default; LECTERN_TEST_LOG=1 shows the app's logs (RUST_LOG filters).
        if std::env::var_os("LECTERN_TEST_LOG").is_some() {
            lectern_api::telemetry::init();
        }
        // The constructor `serve` uses.
        let state = AppState::new(pool.clone(), options.settings_beside(&pool));
        let caches: [Arc<dyn Follower>; 4] = [
            state.reads.clone(),
            state.authenticator.clone(),
            state.listing.first_pages.clone(),
            state.feeds.heads.clone(),
        ];
        let application = Application::build("127.0.0.1:0".parse().expect("address"), state).await.expect("bind");
        let address = application.local_addr().expect("bound address");
        let state = application.state();
        tokio::spawn(application.run_until_stopped(shutdown));
        // The listener `serve` opens beside the public port, with the same readiness check.
        let operations = OperationsServer::bind("127.0.0.1:0".parse().expect("address")).await.expect("bind");
        let operations_address = operations.local_addr();
        let readiness = lectern_api::http::operations::readiness_check(&state);
        tokio::spawn(operations.run(readiness, Arc::new(|| {}), std::future::pending()));
        let http = reqwest::Client::new();
        (Self { address, pool, http, state: Some(state), operations: operations_address }, caches)
    }

    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.address)
    }

    /// GET `path` on the operations listener, which must answer.
    pub async fn get_operations(&self, path: &str) -> Reply {
        let address = self.operations.expect("an in-process app has an operations listener");
        let response = self.http.get(format!("http://{address}{path}")).send().await;
        Reply::read(response.expect("the operations listener answers")).await
    }

    /// A key for `workspace_id` with `scopes`.
    pub async fn key(&self, workspace_id: Uuid, scopes: &[Scope]) -> String {
        create_key(&self.pool, workspace_id, scopes).await.1
    }

    /// A fresh workspace and a `contacts:read` key for it.
    pub async fn workspace_with_key(&self) -> (Uuid, String) {
        let workspace_id = Uuid::new_v4();
        (workspace_id, self.key(workspace_id, &[Scope::ContactsRead]).await)
    }

    /// Issues a key to a fresh workspace and revokes it. Every waiting request checks its
    /// own key again on a revocation anywhere, so this wakes them all while nothing of
    /// theirs changes.
    pub async fn revoke_a_key_elsewhere(&self) {
        let (key_id, _) = create_key(&self.pool, Uuid::new_v4(), &[Scope::ContactsRead]).await;
        lectern_api::keys::store::revoke(&self.pool, &key_id).await.expect("revoke another workspace's key");
    }

    /// GET with an API key.
    pub async fn get(&self, key: &str, path_and_query: &str) -> Reply {
        self.send(self.http.get(self.url(path_and_query)).header("X-API-Key", key)).await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        Reply::read(request.send().await.expect("request reaches the app")).await
    }

    /// Waits until the feed serves every change committed so far to the read model, and
    /// the app has heard the notification of each, where it knows a feed's head at all.
    /// The feed serves a change once every older writer of the read model has ended (the
    /// feed's bound), and an empty
    /// poll is answered from what the app has heard, which follows a commit by the
    /// notification's delivery: a test that writes and then polls at once would
    /// otherwise race both.
    pub async fn heard_every_commit(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let heads: Vec<(String, Uuid, i64)> = sqlx::query_as(
            "select 'contacts', workspace_id, max(change_xid) from contacts group by workspace_id
             union all
             select 'items', workspace_id, max(change_xid) from items group by workspace_id",
        )
        .fetch_all(&self.pool)
        .await
        .expect("read the feeds' newest transactions");
        let newest = heads.iter().map(|(_, _, newest)| *newest).max().unwrap_or(0);
        loop {
            let bound: i64 = sqlx::query_scalar("select bound from read_model_feed_bound()")
                .fetch_one(&self.pool)
                .await
                .expect("read the feed's bound");
            if bound > newest {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "position {newest} was not below the feed's bound in 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let Some(state) = &self.state else { return };
        // The app's own bound too: `since=latest` takes it as it is while every commit the
        // app heard of is below it.
        state.feeds.bound.sampled_since(&state.pool, std::time::Instant::now()).await.expect("sample the app's bound");
        for (resource, workspace_id, newest) in heads {
            let resource = if resource == "contacts" { "contacts" } else { "items" };
            // An unknown head sends the next poll to the database, which has everything.
            while state.feeds.heads.known((resource, workspace_id)).is_some_and(|known| known < newest) {
                assert!(tokio::time::Instant::now() < deadline, "the app did not hear of {resource} {newest} in 10 s");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// Follows `nextCursor` from `first` to the end; returns every page's body.
    pub async fn traverse(&self, key: &str, first: &str) -> Vec<Value> {
        traverse(&self.http, &self.url(""), key, first).await.unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// Every id a traversal from `first` serves, in order, checking that every page but
    /// the last says `hasMore` with a cursor and the last does not.
    pub async fn traversal_ids(&self, key: &str, first: &str) -> Vec<String> {
        let pages = self.traverse(key, first).await;
        let last = pages.len() - 1;
        for (index, page) in pages.iter().enumerate() {
            let more = index < last;
            assert_eq!(page["page"]["hasMore"], more, "{first}, page {index}: {page}");
            assert_eq!(page["page"]["nextCursor"].is_string(), more, "{first}, page {index}: {page}");
        }
        pages
            .iter()
            .flat_map(|page| page["data"].as_array().unwrap_or_else(|| panic!("no data array: {page}")).iter())
            .map(id_of)
            .collect()
    }

    /// Continues the traversal of `first` from `cursor` to the end; every id served after
    /// the cursor, in order.
    pub async fn ids_after(&self, key: &str, first: &str, cursor: String) -> Vec<String> {
        let separator = if first.contains('?') { '&' } else { '?' };
        let mut listed = Vec::new();
        let mut cursor = Some(cursor);
        while let Some(token) = cursor {
            let reply = self.get(key, &format!("{first}{separator}cursor={}", urlencode(&token))).await;
            reply.assert_ok();
            listed.extend(reply.ids());
            cursor = reply.body["page"]["nextCursor"].as_str().map(str::to_owned);
            assert_eq!(reply.body["page"]["hasMore"], cursor.is_some(), "{}", reply.text);
            assert!(listed.len() < 10_000, "traversal does not end");
        }
        listed
    }
}

/// Until the change listener is up, the key and first-page caches neither serve nor
/// keep anything, so a test that counts statements or cache hits would race with it.
async fn wait_until_trusted(caches: &[Arc<dyn Follower>]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !caches.iter().all(|cache| cache.trust().get()) {
        assert!(tokio::time::Instant::now() < deadline, "the app's change listener did not connect within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Follows `nextCursor` from `first` (a path and query) on the API at `base` to the end;
/// every page's body, or what went wrong: a request that failed, an answer other than 200,
/// a traversal that does not end.
pub async fn traverse(http: &reqwest::Client, base: &str, key: &str, first: &str) -> Result<Vec<Value>, String> {
    let mut pages = Vec::new();
    let separator = if first.contains('?') { '&' } else { '?' };
    let mut next = first.to_owned();
    while pages.len() < 10_000 {
        let response = http
            .get(format!("{base}{next}"))
            .header("X-API-Key", key)
            .send()
            .await
            .map_err(|error| format!("{next}: {error}"))?;
        let status = response.status();
        let text = response.text().await.map_err(|error| format!("{next}: {error}"))?;
        if status != reqwest::StatusCode::OK {
            return Err(format!("{next} answered {status}: {text}"));
        }
        let page: Value = serde_json::from_str(&text).map_err(|error| format!("{next}: {error}: {text}"))?;
        let cursor = page["page"]["nextCursor"].as_str().map(str::to_owned);
        pages.push(page);
        match cursor {
            Some(cursor) => next = format!("{first}{separator}cursor={}", urlencode(&cursor)),
            None => return Ok(pages),
        }
    }
    Err(format!("the traversal of {first} does not end"))
}

/// Percent-encodes a query value.
pub fn urlencode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    /// The body as JSON, or `Value::Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("read body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Self { status, headers, text, body }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// 200 with `{data, page, requestId}` or `{data, requestId}` and matching ids.
    pub fn assert_ok(&self) {
        assert_eq!(self.status, 200, "expected 200, got {}: {}", self.status, self.text);
        self.assert_request_id();
    }

    /// The contract's error shape, exactly, with `status` and `code`.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "expected {status} {code}, got {}: {}", self.status, self.text);
        let object = self.body.as_object().unwrap_or_else(|| panic!("error body is not a JSON object: {}", self.text));
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["error", "requestId"], "{}", self.text);
        let error = self.body["error"].as_object().expect("error is an object");
        assert!(error.keys().all(|key| ["code", "message", "details"].contains(&key.as_str())), "{}", self.text);
        assert_eq!(self.body["error"]["code"], code, "{}", self.text);
        let message = self.body["error"]["message"].as_str().expect("message is a string");
        assert!(!message.is_empty(), "message must not be empty");
        assert!(
            self.header("content-type").is_some_and(|kind| kind.starts_with("application/json")),
            "error content type: {:?}",
            self.header("content-type")
        );
        self.assert_request_id();
    }

    /// `details` of a VALIDATION_ERROR, which must name each bad parameter.
    /// The error's problems, one per entry; a refused sync token's details (an object) as
    /// the one entry `<parameter>: <problem>`.
    pub fn details(&self) -> Vec<String> {
        let details = &self.body["error"]["details"];
        if let (Some(parameter), Some(problem)) = (details["parameter"].as_str(), details["problem"].as_str()) {
            return vec![format!("{parameter}: {problem}")];
        }
        details
            .as_array()
            .map(|details| details.iter().filter_map(|d| d.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// Whether the error tells the client, in a form it can act on, to sync again from the
    /// beginning: `details.startOver` is true (and `details.parameter` is `since`).
    pub fn says_start_over(&self) -> bool {
        let details = &self.body["error"]["details"];
        details["startOver"] == serde_json::Value::Bool(true) && details["parameter"] == "since"
    }

    /// The body's requestId matches the pattern and equals `X-Request-Id`.
    pub fn assert_request_id(&self) {
        let header = self.header("x-request-id").expect("X-Request-Id header");
        assert!(is_request_id(header), "X-Request-Id {header:?} does not match the pattern");
        if let Some(body_id) = self.body.get("requestId") {
            assert_eq!(body_id, header, "body requestId differs from X-Request-Id");
        }
    }

    /// The `data` array of a listing.
    pub fn data(&self) -> &Vec<Value> {
        self.body["data"].as_array().unwrap_or_else(|| panic!("no data array: {}", self.text))
    }

    /// Names in `data`, in order.
    pub fn names(&self) -> Vec<String> {
        self.data().iter().map(|record| record["name"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// Ids in `data`, in order.
    pub fn ids(&self) -> Vec<String> {
        self.data().iter().map(id_of).collect()
    }

    /// The page's `nextCursor`, which must be there.
    pub fn next_cursor(&self) -> String {
        self.body["page"]["nextCursor"].as_str().unwrap_or_else(|| panic!("no nextCursor: {}", self.text)).to_owned()
    }
}

/// A record's id, which it must have.
pub fn id_of(record: &Value) -> String {
    record["id"].as_str().unwrap_or_else(|| panic!("record without an id: {record}")).to_owned()
}

/// `ids` as the API writes them, to compare with [`Reply::ids`].
pub fn id_strings(ids: &[Uuid]) -> Vec<String> {
    ids.iter().map(Uuid::to_string).collect()
}

/// The sorted key names of a JSON object, to compare a shape with the contract's.
pub fn keys_of(value: &Value) -> Vec<String> {
    let object = value.as_object().unwrap_or_else(|| panic!("not a JSON object: {value}"));
    let mut keys: Vec<String> = object.keys().cloned().collect();
    keys.sort_unstable();
    keys
}

/// The contract's instants: `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`.
pub fn is_millisecond_instant(text: &str) -> bool {
    const TEMPLATE: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    text.len() == TEMPLATE.len()
        && text.bytes().zip(TEMPLATE).all(|(byte, &expected)| match expected {
            b'd' => byte.is_ascii_digit(),
            other => byte == other,
        })
}

/// The contract's RequestId pattern: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
pub fn is_request_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    (1..=128).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}
