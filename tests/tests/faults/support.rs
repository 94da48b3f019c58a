//! What the fault tests share: the in-process API on a private PostgreSQL server, a
//! request that must be answered within a bound, the shape of a 503, and the run of a
//! checking script from `scripts/`.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lectern_api::keys::Scope;
use lectern_api::reads::{lazy_pool, PoolSettings};
use lectern_tests::app::AppOptions;
use lectern_tests::binaries::lectern_api;
use lectern_tests::database::admin_url;
use lectern_tests::postgres::TestPostgres;
use lectern_tests::seed::create_key;
use lectern_tests::{ContactSeed, Reply, TestApp};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::process::Command;
use uuid::Uuid;

/// Slack on top of a configured timeout before a request counts as hanging: the
/// machine is small and shared, so this is about hangs, not speed.
pub(crate) const MARGIN: Duration = Duration::from_secs(15);
/// How long a recovered database may take to be used again by the API.
pub(crate) const RECOVERY: Duration = Duration::from_secs(60);

/// The in-process API on a pool to a private PostgreSQL server, with one workspace,
/// its `contacts:read` key and a few contacts.
pub(crate) struct PrivateApi {
    pub(crate) postgres: TestPostgres,
    pub(crate) app: TestApp,
    /// A pool of the test's own (not the API's), for seeding and inspecting.
    pub(crate) admin: PgPool,
    pub(crate) key: String,
    pub(crate) contacts: Vec<Uuid>,
    pub(crate) settings: PoolSettings,
}

impl PrivateApi {
    pub(crate) async fn start(settings: PoolSettings) -> Self {
        let postgres = TestPostgres::start_new().await;
        lectern_api::reads::create_and_migrate(&postgres.url()).await.expect("create and migrate the private database");
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(&postgres.url())
            .await
            .expect("connect to the private database");
        let workspace = Uuid::new_v4();
        let (_, key) = create_key(&admin, workspace, &[Scope::ContactsRead]).await;
        let mut contacts = Vec::new();
        for index in 0..20 {
            contacts.push(ContactSeed::named(&format!("Contact {index:02}")).at(index).insert(&admin, workspace).await);
        }
        let pool = lazy_pool(&postgres.url(), &settings).expect("pool options");
        let options =
            AppOptions { connections_per_workspace: Some(settings.connections_per_workspace), ..AppOptions::default() };
        let app = TestApp::spawn_with(pool, options).await;
        Self { postgres, app, admin, key, contacts, settings }
    }

    /// The bound within which every answer must come: the acquire timeout, one
    /// statement timeout, and the margin.
    pub(crate) fn bound(&self) -> Duration {
        self.settings.acquire_timeout + self.settings.statement_timeout + MARGIN
    }

    /// GET `path` with the workspace's key, answered within [`PrivateApi::bound`].
    pub(crate) async fn get(&self, path: &str) -> (Reply, Duration) {
        let started = Instant::now();
        let reply = answered_within(self.bound(), path, self.app.get(&self.key, path)).await;
        (reply, started.elapsed())
    }

    pub(crate) fn contact_path(&self) -> String {
        format!("/v1/contacts/{}", self.contacts[0])
    }

    /// Polls `path` until it is a 200, failing after [`RECOVERY`].
    pub(crate) async fn wait_until_ok(&self, path: &str, unauthenticated: bool) -> Reply {
        let deadline = Instant::now() + RECOVERY;
        loop {
            let reply = if unauthenticated {
                answered_within(self.bound(), path, self.app.send(self.app.http.get(self.app.url(path)))).await
            } else {
                self.get(path).await.0
            };
            if reply.status == 200 {
                return reply;
            }
            assert_ne!(reply.status, 500, "{path} was a 500 while recovering: {}", reply.text);
            assert!(
                Instant::now() < deadline,
                "{path} did not recover within {RECOVERY:?}; last answer {}: {}\nserver log:\n{}",
                reply.status,
                reply.text,
                self.postgres.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Awaits `request`, failing the test if it takes longer than `bound` (a hang).
pub(crate) async fn answered_within<F: Future<Output = Reply>>(bound: Duration, what: &str, request: F) -> Reply {
    tokio::time::timeout(bound, request)
        .await
        .unwrap_or_else(|_| panic!("{what} was not answered within {bound:?}: the request hangs"))
}

/// 503 `SERVICE_UNAVAILABLE` in the contract's error shape, with a `Retry-After` in seconds.
pub(crate) fn assert_unavailable(reply: &Reply, what: &str) {
    assert_ne!(reply.status, 500, "{what}: a database fault must never be a 500: {}", reply.text);
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    let retry_after = reply.header("retry-after");
    assert!(
        retry_after.is_some_and(|seconds| seconds.parse::<u32>().is_ok_and(|seconds| seconds >= 1)),
        "{what}: a 503 needs Retry-After in whole seconds, got {retry_after:?}"
    );
}

/// Runs `scripts/<script>` (bash) against this build's `lectern-api` and the tests'
/// PostgreSQL server, and returns its stdout. Fails with the script's own output when it
/// fails or takes longer than `within`: the Python tools the scripts install from PyPI
/// being unavailable is a failure, never a skip.
pub(crate) async fn run_script(script: &str, within: Duration) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts").join(script);
    assert!(path.exists(), "{} is missing", path.display());
    let started = Instant::now();

    let run = Command::new("bash")
        .arg(&path)
        .env("LECTERN_API_BIN", lectern_api())
        .env("LECTERN_TEST_DATABASE_URL", admin_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(within, run)
        .await
        .unwrap_or_else(|_| panic!("scripts/{script} did not finish within {within:?}"))
        .unwrap_or_else(|error| panic!("run bash scripts/{script}: {error}"));

    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/{script} failed ({}, after {:?}); it needs python3 and PyPI for its venv.\n\
         stdout:\n{stdout}\nstderr:\n{stderr}",
        output.status,
        started.elapsed()
    );
    stdout
}

/// The number a script printed as `<script>: <number><suffix>` on a line of its own.
pub(crate) fn reported_count(stdout: &str, script: &str, suffix: &str) -> u64 {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{script}: "))?.strip_suffix(suffix)?.parse().ok())
        .unwrap_or_else(|| panic!("scripts/{script} did not report `{script}: <count>{suffix}`:\n{stdout}"))
}
