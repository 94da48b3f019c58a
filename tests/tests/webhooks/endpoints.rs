//! Endpoints and their delivery log through the operator's command line,
//! `lectern-api webhooks …`: registering, listing, and reading or waiting for the log.

use std::time::{Duration, Instant};

use lectern_tests::binaries::Run;
use lectern_tests::process::Launch;
use lectern_tests::seed::TEST_PEPPER;
use serde_json::Value;
use uuid::Uuid;

/// How long one command may take before the test fails instead of hanging.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// `lectern-api webhooks <args>` against `database_url` with the tests' pepper and
/// nothing else.
fn command(database_url: &str, args: &[&str]) -> Launch {
    Launch::api().arg("webhooks").args(args).env("DATABASE_URL", database_url).env("LECTERN_KEY_PEPPER", TEST_PEPPER)
}

/// `lectern-api webhooks <args>` against `database_url`, with the tests' pepper and
/// private targets allowed (the receivers listen on loopback) unless `env` says otherwise.
pub async fn webhooks(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    command(database_url, args).env("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1").envs(env).run(COMMAND_TIMEOUT).await
}

/// `lectern-api webhooks <args>` with the tests' pepper and nothing else: private targets
/// are NOT allowed, as on an operator's machine that never set the flag.
pub async fn webhooks_strict(database_url: &str, args: &[&str]) -> Run {
    command(database_url, args).run(COMMAND_TIMEOUT).await
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
    let created = run.json();
    Endpoint {
        id: created["id"].as_str().and_then(|id| Uuid::parse_str(id).ok()).expect("an endpoint id"),
        secret: created["secret"].as_str().expect("a secret").to_owned(),
    }
}

/// `webhooks list --output json`.
pub async fn list(database_url: &str) -> Vec<Value> {
    let run = webhooks(database_url, &["list", "--output", "json"], &[]).await;
    run.assert_success();
    serde_json::from_value(run.json()).expect("list prints a JSON array")
}

/// `webhooks list --output json`, the entry of `endpoint`.
pub async fn listed(database_url: &str, endpoint: Uuid) -> Value {
    list(database_url)
        .await
        .into_iter()
        .find(|listed| listed["id"] == endpoint.to_string())
        .unwrap_or_else(|| panic!("{endpoint} is not listed"))
}

/// `webhooks deliveries <id> --output json`.
pub async fn deliveries(database_url: &str, endpoint: Uuid) -> Vec<Value> {
    let run = webhooks(database_url, &["deliveries", &endpoint.to_string(), "--output", "json"], &[]).await;
    run.assert_success();
    serde_json::from_value(run.json()).expect("deliveries prints a JSON array")
}

/// The log entry of `delivery` in `webhooks deliveries`.
pub fn entry<'a>(log: &'a [Value], delivery: &str) -> &'a Value {
    log.iter().find(|entry| entry["id"] == delivery).unwrap_or_else(|| panic!("{delivery} is not in the log: {log:#?}"))
}

/// Polls `webhooks deliveries <endpoint>` until `enough` holds for the log, or panics
/// after `within`.
pub async fn wait_for_log(
    database_url: &str,
    endpoint: Uuid,
    within: Duration,
    what: &str,
    enough: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let log = deliveries(database_url, endpoint).await;
        if enough(&log) {
            return log;
        }
        assert!(Instant::now() < deadline, "{what} not within {within:?}; log: {log:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
