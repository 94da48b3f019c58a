//! What the webhook tests share: the command line, a feed follower, the metrics.

use std::time::Duration;

use lectern_tests::app::{urlencode, TestApp};
use lectern_tests::binaries::{lectern_api, Run};
use lectern_tests::process::run_to_end;
use lectern_tests::seed::TEST_PEPPER;
use serde_json::Value;
use uuid::Uuid;

pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// `lectern-api webhooks <args>` against `database_url`, with the tests' pepper and
/// private targets allowed (the receivers listen on loopback) unless `env` says otherwise.
pub async fn webhooks(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut all = vec!["webhooks"];
    all.extend_from_slice(args);
    let mut environment = vec![
        ("DATABASE_URL", database_url),
        ("LECTERN_KEY_PEPPER", TEST_PEPPER),
        ("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1"),
    ];
    environment.extend_from_slice(env);
    run_to_end(&lectern_api(), &all, &environment, COMMAND_TIMEOUT).await
}

/// A registered endpoint: its id and signing secret.
pub struct Endpoint {
    pub id: Uuid,
    pub secret: String,
}

/// Registers `url` for `workspace` and `resources`.
pub async fn register(database_url: &str, workspace: Uuid, url: &str, resources: &[&str]) -> Endpoint {
    let workspace = workspace.to_string();
    let mut args = vec!["create", "--workspace", &workspace, "--url", url, "--output", "json"];
    for resource in resources {
        args.extend_from_slice(&["--resource", resource]);
    }
    let run = webhooks(database_url, &args, &[]).await;
    run.assert_success();
    let created: Value = serde_json::from_str(run.stdout.trim()).expect("create prints JSON");
    Endpoint {
        id: created["id"].as_str().and_then(|id| Uuid::parse_str(id).ok()).expect("an endpoint id"),
        secret: created["secret"].as_str().expect("a secret").to_owned(),
    }
}

/// `webhooks list --output json`.
pub async fn list(database_url: &str) -> Vec<Value> {
    let run = webhooks(database_url, &["list", "--output", "json"], &[]).await;
    run.assert_success();
    serde_json::from_str(run.stdout.trim()).expect("list prints JSON")
}

/// `webhooks deliveries <id> --output json`.
pub async fn deliveries(database_url: &str, endpoint: Uuid) -> Vec<Value> {
    let run = webhooks(database_url, &["deliveries", &endpoint.to_string(), "--output", "json"], &[]).await;
    run.assert_success();
    serde_json::from_str(run.stdout.trim()).expect("deliveries prints JSON")
}

/// An integration's copy of one feed: the ids it holds, and its token.
pub struct Follower {
    pub path: &'static str,
    pub token: Option<String>,
    pub held: std::collections::BTreeMap<String, Value>,
}

impl Follower {
    pub fn contacts() -> Self {
        Self { path: "/v1/contacts/changes", token: None, held: Default::default() }
    }

    /// Pulls until the feed has no more, applying each entry.
    pub async fn pull(&mut self, app: &TestApp, key: &str) {
        loop {
            let path = match &self.token {
                Some(token) => format!("{}?limit=100&since={}", self.path, urlencode(token)),
                None => format!("{}?limit=100", self.path),
            };
            let reply = app.get(key, &path).await;
            reply.assert_ok();
            for entry in reply.data() {
                let id = entry["id"].as_str().expect("id").to_owned();
                if entry["change"] == "upserted" {
                    self.held.insert(id, entry["record"].clone());
                } else {
                    self.held.remove(&id);
                }
            }
            self.token = reply.body["syncToken"].as_str().map(str::to_owned);
            if reply.body["hasMore"] != Value::Bool(true) {
                return;
            }
        }
    }
}
