//! The private deployment a nemesis run strikes, built from the end-to-end tests' harness
//! (the same private servers, processes and forwarder the fault tests use): a primary with
//! two `pg_basebackup` standbys, a TCP forwarder standing for the database's stable address
//! (a DNS name), and two API processes, every process reaching PostgreSQL through the
//! forwarder, as the operations guide has them deployed. On the `single` topology, one
//! nats-server and one projector; on `scale`, a three-node NATS cluster with the stream at
//! three replicas, two projectors, and a streaming replica (behind a forwarder of its own,
//! the replica's DNS name) that the second API process reads from.
//!
//! After a schedule the deployment is healed back into that shape the way an operator
//! would: a dead process started again, standbys and the replica that follow no live
//! primary replaced by fresh copies of the one that serves now.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use lectern_api::keys::Scope;
use lectern_tests::forwarder::Forwarder;
use lectern_tests::nats::{TestCluster, TestNats};
use lectern_tests::postgres::TestPostgres;
use lectern_tests::process::Launch;
use lectern_tests::projector::ProjectorProcess;
use lectern_tests::seed::TEST_PEPPER;
use lectern_tests::serve::Serve;
use secrecy::SecretString;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::Connection;
use uuid::Uuid;

use super::faults::Topology;

/// Workspaces the publishers write and the clients follow.
pub const WORKSPACES: usize = 3;
/// API processes, as a fleet runs them: every client picks one per request.
pub const API_PROCESSES: usize = 2;
/// Standbys kept beside the primary, ready for a failover.
pub const STANDBYS: usize = 2;

/// The stream's replicas on the cluster: one per node.
const CLUSTER_REPLICAS: &str = "3";

/// The event stream's servers.
pub enum Nats {
    Single(TestNats),
    Cluster(TestCluster),
}

impl Nats {
    /// What every process is given as `NATS_URL`: the server, or every node of the cluster.
    pub fn url(&self) -> String {
        match self {
            Self::Single(nats) => nats.url.clone(),
            Self::Cluster(cluster) => cluster.urls(),
        }
    }
}

/// The streaming replica the second API process reads from on `scale`, and the address it
/// is given, which the operator points at a fresh copy after a failover.
pub struct Replica {
    pub server: TestPostgres,
    pub address: Forwarder,
}

/// One workspace and a key reading both its resources.
#[derive(Clone, Debug)]
pub struct Tenant {
    pub workspace: Uuid,
    pub key: String,
}

/// Where the API processes listen now: a process started again listens elsewhere, and a
/// killed one nowhere. Clients pick from it for every request.
#[derive(Clone, Default)]
pub struct Endpoints(Arc<RwLock<Vec<Option<String>>>>);

impl Endpoints {
    fn set(&self, index: usize, address: Option<String>) {
        let Ok(mut addresses) = self.0.write() else { return };
        if addresses.len() <= index {
            addresses.resize(index + 1, None);
        }
        addresses[index] = address;
    }

    /// The base URL of a listening process, chosen by `choice`; `None` while none listens.
    pub fn pick(&self, choice: usize) -> Option<String> {
        let addresses = self.0.read().ok()?;
        let listening: Vec<&String> = addresses.iter().flatten().collect();
        (!listening.is_empty()).then(|| format!("http://{}", listening[choice % listening.len()]))
    }
}

/// The cursor secrets one API process is started with: the one it signs with, and those it
/// still accepts.
#[derive(Clone, Debug)]
pub struct CursorSecrets {
    pub signing: String,
    pub previous: Vec<String>,
}

/// The key peppers one API process is started with: the one it hashes under, and those
/// it still accepts.
#[derive(Clone, Debug)]
pub struct Peppers {
    pub current: String,
    pub previous: Vec<String>,
}

impl Peppers {
    /// What `lectern-api` (serve and the `keys` commands) is given for them.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("LECTERN_KEY_PEPPER", self.current.clone())];
        if !self.previous.is_empty() {
            env.push(("LECTERN_PREVIOUS_KEY_PEPPERS", self.previous.join(",")));
        }
        env
    }
}

/// Every cursor secret the deployment has signed with, oldest first: what opens any token
/// a client holds, for a violation's report.
#[derive(Clone, Default)]
pub struct CursorSecretsEver(Arc<std::sync::Mutex<Vec<String>>>);

impl CursorSecretsEver {
    pub fn add(&self, secret: &str) {
        if let Ok(mut secrets) = self.0.lock() {
            secrets.push(secret.to_owned());
        }
    }

    /// Sync tokens as the API opens them, under every one of the secrets.
    pub fn tokens(&self) -> Option<lectern_api::feed::token::SyncTokens> {
        let secrets = self.0.lock().ok()?;
        let (current, previous) = secrets.split_last()?;
        let previous = previous.iter().rev().map(|secret| SecretString::from(secret.clone())).collect();
        let signing = lectern_api::signing::SigningSecrets::new(SecretString::from(current.clone()), previous);
        Some(lectern_api::feed::token::SyncTokens::new(signing))
    }
}

/// Each API process's `--db-pool-size`.
const API_POOL_SIZE: &str = "5";

/// A fresh cursor secret, random enough for a test deployment.
pub fn new_secret() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// The running deployment.
pub struct Deployment {
    /// The server the stable address points at.
    pub primary: TestPostgres,
    /// Standbys of [`Deployment::primary`] (until a fault leaves them following another).
    pub standbys: Vec<TestPostgres>,
    /// Whether the standbys and the replica still follow the primary: a failover or a
    /// restore leaves them following a server that no longer serves.
    pub copies_follow: bool,
    /// The stable database address every process is given.
    pub address: Forwarder,
    pub nats: Nats,
    /// One on `single`, two on `scale`; `None` while one is down.
    pub projectors: Vec<Option<ProjectorProcess>>,
    pub replica: Option<Replica>,
    pub apis: Vec<Option<Serve>>,
    /// What each API process is (re)started with: a rotation changes them one by one.
    pub cursor_secrets: Vec<CursorSecrets>,
    /// The key peppers each API process is (re)started with: a rotation changes them too.
    pub peppers: Vec<Peppers>,
    pub endpoints: Endpoints,
    pub tenants: Vec<Tenant>,
    /// Every cursor secret signed with so far.
    pub cursor_secrets_ever: CursorSecretsEver,
    /// The ids of the webhook endpoints registered (one per workspace, both resources).
    pub webhook_endpoints: Vec<String>,
}

impl Deployment {
    /// Starts everything, migrated, with a key per workspace, and waits until every process
    /// is ready.
    pub async fn start(topology: Topology) -> Self {
        let primary = TestPostgres::start_primary().await;
        lectern_api::reads::create_and_migrate(&primary.url()).await.expect("create and migrate the read model");
        let tenants = issue_keys(&primary.url()).await;
        let address = Forwarder::start(primary.port).await;
        let (nats, projectors, replica) = match topology {
            Topology::Single => (Nats::Single(TestNats::start().await), 1, None),
            Topology::Scale => {
                let server = primary.start_standby(None).await;
                let address = Forwarder::start(server.port).await;
                (Nats::Cluster(TestCluster::start().await), 2, Some(Replica { server, address }))
            }
        };
        let mut standbys = Vec::with_capacity(STANDBYS);
        for _ in 0..STANDBYS {
            standbys.push(primary.start_standby(None).await);
        }
        let first_secret = new_secret();
        let cursor_secrets_ever = CursorSecretsEver::default();
        cursor_secrets_ever.add(&first_secret);
        let mut deployment = Self {
            primary,
            standbys,
            copies_follow: true,
            address,
            nats,
            projectors: (0..projectors).map(|_| None).collect(),
            replica,
            apis: (0..API_PROCESSES).map(|_| None).collect(),
            cursor_secrets: vec![CursorSecrets { signing: first_secret, previous: Vec::new() }; API_PROCESSES],
            cursor_secrets_ever,
            peppers: vec![Peppers { current: TEST_PEPPER.to_owned(), previous: Vec::new() }; API_PROCESSES],
            endpoints: Endpoints::default(),
            tenants,
            webhook_endpoints: Vec::new(),
        };
        for index in 0..projectors {
            deployment.start_projector(index).await;
        }
        for index in 0..API_PROCESSES {
            deployment.start_api(index).await;
        }
        deployment
    }

    /// The URL of the read model through the stable address.
    pub fn database_url(&self) -> String {
        self.address.url_for("lectern")
    }

    pub async fn start_projector(&mut self, index: usize) {
        let mut projector = ProjectorProcess::on(&self.nats.url(), &self.database_url());
        if matches!(self.nats, Nats::Cluster(_)) {
            projector = projector.env("LECTERN_STREAM_REPLICAS", CLUSTER_REPLICAS);
        }
        self.projectors[index] = Some(projector.start().await);
    }

    pub async fn start_api(&mut self, index: usize) {
        let secrets = &self.cursor_secrets[index];
        // Webhook deliveries go to the nemesis' receiver on loopback.
        let mut serve = Serve::on(&self.database_url())
            .env("LECTERN_CURSOR_SECRET", &secrets.signing)
            .env("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1")
            // Sized, as the operations guide asks, for every process on the test servers'
            // 60 connections: two API processes at 2 × 5 + 2 + 5, two projectors, the checks.
            .env("LECTERN_DB_POOL_SIZE", API_POOL_SIZE);
        if !secrets.previous.is_empty() {
            serve = serve.env("LECTERN_PREVIOUS_CURSOR_SECRETS", &secrets.previous.join(","));
        }
        for (name, value) in self.peppers[index].env() {
            serve = serve.env(name, &value);
        }
        // The last process reads from the replica, the others from the primary alone.
        if let Some(replica) = self.replica.as_ref().filter(|_| index + 1 == API_PROCESSES) {
            serve = serve.env("LECTERN_READ_DATABASE_URL", &replica.address.url_for("lectern"));
        }
        let serve = serve.start().await;
        self.endpoints.set(index, Some(serve.api.clone()));
        self.apis[index] = Some(serve);
    }

    /// Restarts API process `index` the way a rolling restart does: SIGTERM, a clean exit,
    /// then a new process with the settings it has now.
    pub async fn restart_api(&mut self, index: usize) {
        if let Some(api) = self.take_api(index) {
            let _ = api.stop().await;
        }
        self.start_api(index).await;
    }

    /// Takes API process `index` out of the clients' rotation and hands it over.
    pub fn take_api(&mut self, index: usize) -> Option<Serve> {
        self.endpoints.set(index, None);
        self.apis[index].take()
    }

    /// The failover the operations guide describes: the primary is lost (stopped as a crash
    /// stops it), `standby` (stopped, so it missed what was written since) is started and
    /// promoted, and the stable address is pointed at it. Returns the primary it replaced.
    pub async fn fail_over_to(&mut self, mut standby: TestPostgres) -> TestPostgres {
        self.primary.stop().await;
        standby.start().await;
        standby.promote().await;
        let old = std::mem::replace(&mut self.primary, standby);
        self.address.point_at(self.primary.port);
        self.primary_replaced();
        old
    }

    /// Every copy of the primary follows one that no longer serves.
    fn primary_replaced(&mut self) {
        self.copies_follow = false;
    }

    /// Two standbys following the primary that serves now, copied afresh unless they do.
    pub async fn standbys_of_the_primary(&mut self) {
        if let Some(replica) = self.replica.as_mut().filter(|_| !self.copies_follow) {
            // As the operations guide has it: a fresh copy, and the replica's name pointed
            // at it; the API process reading from it needs no restart.
            let fresh = self.primary.start_standby(None).await;
            replica.address.point_at(fresh.port);
            replica.server = fresh;
        }
        if self.copies_follow && self.standbys.len() == STANDBYS {
            return;
        }
        self.standbys.clear();
        for _ in 0..STANDBYS {
            self.standbys.push(self.primary.start_standby(None).await);
        }
        self.copies_follow = true;
    }

    /// Serves from `server`, already taking writes, behind the stable address.
    pub fn serve_from(&mut self, server: TestPostgres) -> TestPostgres {
        let old = std::mem::replace(&mut self.primary, server);
        self.address.point_at(self.primary.port);
        self.primary_replaced();
        old
    }

    /// Back into the deployment's shape: every process running, standbys copied from the
    /// primary that serves now. What did not need healing is left alone.
    pub async fn heal(&mut self) {
        self.standbys_of_the_primary().await;
        for index in 0..self.projectors.len() {
            let died = self.projectors[index].as_mut().is_none_or(|projector| projector.service.exited().is_some());
            if died {
                self.projectors[index] = None;
                self.start_projector(index).await;
            }
        }
        for index in 0..API_PROCESSES {
            let died = self.apis[index].as_mut().is_none_or(|api| api.service.exited().is_some());
            if died {
                self.take_api(index);
                self.start_api(index).await;
            }
        }
    }

    /// The histories the database behind the address lists, and the one it is in, for a
    /// violation's report.
    pub async fn histories(&self) -> String {
        let listed = async {
            let mut connection = sqlx::PgConnection::connect(&self.database_url()).await?;
            let rows: Vec<(i64, Option<i64>, i64, i32)> = sqlx::query_as(
                "select history_id, forked_from, system_identifier, timeline from read_model_histories \
                 order by position_offset",
            )
            .fetch_all(&mut connection)
            .await?;
            let current: Option<i64> =
                sqlx::query_scalar("select read_model_server_history()").fetch_one(&mut connection).await?;
            Ok::<_, sqlx::Error>(format!("{rows:?}, now in {current:?}"))
        };
        listed.await.unwrap_or_else(|error| format!("unreadable: {error}"))
    }

    /// What the running API processes logged of the database's histories, for a
    /// violation's report.
    pub fn history_log_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (index, api) in self.apis.iter().enumerate() {
            let Some(api) = api else { continue };
            for line in api.service.stderr().lines().filter(|line| line.contains("history")) {
                lines.push(format!("API process {index}: {line}"));
            }
        }
        lines
    }

    /// Each key as `keys list` shows it with the peppers API process 0 has (the pepper its
    /// hash depends on), for a violation's report.
    pub async fn keys_report(&self) -> String {
        let mut list =
            Launch::api().args(["keys", "list", "--output", "json"]).env("DATABASE_URL", &self.database_url());
        for (name, value) in self.peppers[0].env() {
            list = list.env(name, &value);
        }
        let Some(run) = list.try_run(Duration::from_secs(30)).await else {
            return "keys list did not answer".to_owned();
        };
        let keys: Vec<Value> = serde_json::from_str(run.stdout.trim()).unwrap_or_default();
        let shown: Vec<String> =
            keys.iter().map(|key| format!("{} {} last used {}", key["id"], key["pepper"], key["lastUsedAt"])).collect();
        format!("{} (exit {:?}) {}", shown.join("; "), run.code, run.stderr.trim())
    }

    /// The processes that exited by themselves (never struck down, so they crashed), with
    /// the end of what each logged.
    pub fn crashed(&mut self) -> Vec<String> {
        let mut crashed = Vec::new();
        for (index, projector) in self.projectors.iter_mut().enumerate() {
            if let Some(projector) = projector.as_mut() {
                if let Some(status) = projector.service.exited() {
                    crashed.push(format!("projector {index} exited ({status}): {}", tail(&projector.log())));
                }
            }
        }
        for (index, api) in self.apis.iter_mut().enumerate() {
            if let Some(api) = api.as_mut() {
                if let Some(status) = api.service.exited() {
                    crashed.push(format!("API process {index} exited ({status}): {}", tail(&api.service.stderr())));
                }
            }
        }
        crashed
    }
}

/// A key per workspace with both read scopes, written before any standby or backup is
/// made, so every copy of the database holds them.
async fn issue_keys(url: &str) -> Vec<Tenant> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect(url)
        .await
        .expect("connect to the read model");
    let mut tenants = Vec::with_capacity(WORKSPACES);
    for _ in 0..WORKSPACES {
        let workspace = Uuid::new_v4();
        let (_, key) =
            lectern_tests::seed::create_key(&pool, workspace, &[Scope::ContactsRead, Scope::ItemsRead]).await;
        tenants.push(Tenant { workspace, key });
    }
    pool.close().await;
    tenants
}

/// The last lines of a process's log, for a report.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}
