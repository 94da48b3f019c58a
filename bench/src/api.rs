//! The release API under load: started on a free port with rate limits far above
//! anything the load can reach, one key per workspace, and a full keyset traversal of
//! the big workspace (which also checks every record is served, and yields a cursor
//! from deep inside it).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lectern_api::keys::store::{self, NewKey};
use lectern_api::keys::{Environment, IssuedKey, Pepper, Scope};
use lectern_api::listing::cursor::{CursorScope, CursorSigner};
use lectern_api::listing::{Position, SortKey};
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_api::resources::Resource;
use lectern_api::signing::SigningSecrets;
use secrecy::{ExposeSecret, SecretString};
use uuid::Uuid;

use super::infra::{free_port, Database, Process};
use super::{Context, Result};
use lectern_fixtures::generator::plan::Plan;

/// What the API hashes keys under; `webhooks create` seals endpoint secrets under it too.
pub const PEPPER: &str = "lectern-bench key pepper; not a secret";
/// Also signs the changes feed's sync tokens, which the feed scenarios open.
pub const CURSOR_SECRET: &str = "lectern-bench cursor secret; not a secret";
/// Never reached by the load, so the limits never answer 429.
const UNLIMITED: &str = "100000000";

pub struct Api {
    pub process: Process,
    pub base: String,
    /// The operations listener, for the API's own latency histogram.
    pub metrics: String,
}

impl Api {
    /// Requests answered so far and the seconds the API spent on them (its own histogram).
    pub async fn served(&self) -> Result<(f64, f64)> {
        let text = reqwest::get(format!("http://{}/metrics", self.metrics)).await?.text().await?;
        let total = |name: &str| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(name) && matches!(line.as_bytes().get(name.len()), Some(b'{' | b' ')))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Ok((total("lectern_http_request_duration_seconds_count"), total("lectern_http_request_duration_seconds_sum")))
    }

    /// Each sample of the metric `name` so far, as its labels and value.
    pub async fn samples(&self, name: &str) -> Result<Vec<(String, f64)>> {
        let text = reqwest::get(format!("http://{}/metrics", self.metrics)).await?.text().await?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let labels = line.strip_prefix(name)?.strip_prefix('{')?;
                let (labels, value) = labels.rsplit_once("} ")?;
                Some((labels.to_owned(), value.trim().parse::<f64>().ok()?))
            })
            .collect())
    }
}

pub async fn start(binary: &Path, database: &Database, work: &Path) -> Result<Api> {
    start_named(binary, database, work, "api", &[]).await
}

/// The API with `extra` settings (`LECTERN_READ_DATABASE_URL`, …), its log `<name>.log`
/// in the work directory, so that two can run side by side.
pub async fn start_named(
    binary: &Path,
    database: &Database,
    work: &Path,
    name: &str,
    extra: &[(&'static str, String)],
) -> Result<Api> {
    let port = free_port()?;
    let mut env = vec![
        ("DATABASE_URL", database.url.clone()),
        ("LECTERN_LISTEN", format!("127.0.0.1:{port}")),
        ("LECTERN_METRICS_LISTEN", "127.0.0.1:0".to_owned()),
        ("LECTERN_KEY_PEPPER", PEPPER.to_owned()),
        ("LECTERN_CURSOR_SECRET", CURSOR_SECRET.to_owned()),
        ("RUST_LOG", "info".to_owned()),
        ("LECTERN_LOG_FORMAT", "json".to_owned()),
    ];
    for limit in [
        "LECTERN_RATE_LIMIT_PER_MINUTE",
        "LECTERN_RATE_LIMIT_BURST",
        "LECTERN_KEY_LOOKUPS_PER_MINUTE",
        "LECTERN_KEY_LOOKUP_BURST",
    ] {
        env.push((limit, UNLIMITED.to_owned()));
    }
    env.extend(extra.iter().cloned());
    let mut process = Process::spawn(binary, &["serve".to_owned()], &env, &work.join(format!("{name}.log")))?;
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        process.check_running()?;
        let ready = reqwest::get(format!("{base}/readyz")).await.map(|response| response.status().is_success());
        if ready.unwrap_or(false) {
            let metrics = logged_metrics_address(&process.log)?;
            return Ok(Api { process, base, metrics });
        }
        if Instant::now() > deadline {
            return Err(format!("lectern-api serve ({name}) was not ready within 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn logged_metrics_address(log: &Path) -> Result<String> {
    let text = std::fs::read_to_string(log).context(format!("read {}", log.display()))?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|record| record["fields"]["message"] == "lectern-api listening")
        .and_then(|record| record["fields"]["metrics"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("no \"lectern-api listening\" line in {}", log.display()).into())
}

/// One key per workspace (contacts and items), in the plan's order: the first two made
/// by `lectern-api keys create --output json`, the rest the same way in-process (a
/// thousand processes would take a minute).
pub async fn create_keys(binary: &Path, database: &Database, plan: &Plan) -> Result<Vec<String>> {
    let mut keys = Vec::with_capacity(plan.workspaces.len());
    for workspace in plan.workspaces.iter().take(2) {
        keys.push(key_from_cli(binary, database, workspace.id).await?);
    }
    for workspace in plan.workspaces.iter().skip(2) {
        keys.push(insert_key(database, workspace.id, &[Scope::ContactsRead, Scope::ItemsRead]).await?);
    }
    Ok(keys)
}

/// A key of `workspace` with `scopes`, stored as `lectern-api keys create` stores one
/// (under the bench's pepper) without starting a process for it.
pub async fn insert_key(database: &Database, workspace: Uuid, scopes: &[Scope]) -> Result<String> {
    let pepper = Pepper::new(SecretString::from(PEPPER.to_owned()));
    let issued = IssuedKey::generate(Environment::Live, &pepper);
    let new = NewKey { workspace_id: workspace, name: Some("lectern-bench"), scopes, expires_at: None };
    store::insert(&database.pool, &issued, &new).await.context("store a key")?;
    Ok(issued.key.expose_secret().to_owned())
}

async fn key_from_cli(binary: &Path, database: &Database, workspace: Uuid) -> Result<String> {
    let output = tokio::process::Command::new(binary)
        .args(["keys", "create", "--workspace", &workspace.to_string(), "--scope", "contacts:read"])
        .args(["--scope", "items:read", "--name", "lectern-bench", "--output", "json"])
        .env_clear()
        .env("DATABASE_URL", &database.url)
        .env("LECTERN_KEY_PEPPER", PEPPER)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("run lectern-api keys create")?;
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|error| {
        format!("keys create did not print JSON ({error}): {}", String::from_utf8_lossy(&output.stderr))
    })?;
    json["key"].as_str().map(str::to_owned).ok_or_else(|| format!("no key in {json}").into())
}

/// A walk through every page of a workspace's contacts, 100 at a time.
pub struct Traversal {
    pub records: usize,
    pub elapsed: Duration,
    /// A cursor three quarters of the way through.
    pub deep_cursor: String,
    /// Where that cursor points, for pgbench to run the same statement.
    pub deep_position: Position,
}

pub async fn traverse(api: &Api, key: &str, workspace: Uuid) -> Result<Traversal> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut cursors = Vec::new();
    let mut records = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/v1/contacts?limit=100", api.base);
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let response = client.get(&url).header("X-API-Key", key).send().await.context("GET /v1/contacts")?;
        if !response.status().is_success() {
            return Err(
                format!("traversal got {}: {}", response.status(), response.text().await.unwrap_or_default()).into()
            );
        }
        let page: serde_json::Value = response.json().await.context("a page of contacts")?;
        records += page["data"].as_array().map_or(0, Vec::len);
        match page["page"]["nextCursor"].as_str() {
            Some(next) => {
                cursors.push(next.to_owned());
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    let elapsed = started.elapsed();
    let deep_cursor = cursors.get(cursors.len() * 3 / 4).cloned().ok_or("the workspace has a single page")?;
    let signer = CursorSigner::new(
        SigningSecrets::only(SecretString::from(CURSOR_SECRET.to_owned())),
        Duration::from_secs(86_400),
    );
    let scope = CursorScope {
        resource: Contacts::NAME,
        workspace_id: workspace,
        kind: ContactType::All.as_str(),
        search: None,
        sort: SortKey::CreatedAt,
    };
    let deep_position = signer.open(&deep_cursor, &scope).map_err(|error| format!("the deep cursor {error}"))?;
    Ok(Traversal { records, elapsed, deep_cursor, deep_position })
}
