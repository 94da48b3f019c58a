//! The services as compose.yaml starts them, run for real on this machine: each
//! Lectern service's environment (interpolated from .env the way compose does) given to
//! its real binary, and its health check run against it. Only what cannot work outside
//! compose's network changes: service host names become this test's own PostgreSQL and
//! NATS, and `0.0.0.0:port` listeners become free loopback ports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lectern_tests::nats::{free_port, TestNats};
use lectern_tests::process::{self, Launch};
use lectern_tests::{TestApp, TestDatabase};

use crate::cli;
use crate::stack::{self, compose, env_example, interpolate, is_secret_name, port_of, Service};

/// How long a service may take to become healthy, or to refuse to start.
const WITHIN: Duration = Duration::from_secs(30);

/// A secret as `openssl rand -base64 48` makes them: 64 bytes.
const REAL_SECRET: &str = "k3Vq9Zb1Xo7Jf2Lr8Tn4Wc6Ye0Ha5Gd3Su1Mi9Qp7Rx2Bv4Nl6Cz8Ek0Fj5Dh3Aw";

/// A service's environment as compose would give it, made runnable here.
struct LocalEnvironment {
    variables: BTreeMap<String, String>,
    /// Container port → the free loopback port standing in for it.
    ports: BTreeMap<u16, u16>,
}

impl LocalEnvironment {
    /// `service`'s environment interpolated with `dotenv`, with `overrides` applied and
    /// every `0.0.0.0:port` listener moved to a free loopback port.
    fn of(service: &Service<'_>, dotenv: &BTreeMap<String, String>, overrides: &[(&str, &str)]) -> Self {
        let mut variables = BTreeMap::new();
        let mut ports = BTreeMap::new();
        for (name, value) in service.environment() {
            let mut value = interpolate(&value, dotenv);
            if let Some(port) = value.strip_prefix("0.0.0.0:") {
                let local = free_port();
                ports.insert(port.parse().expect("a listen port"), local);
                value = format!("127.0.0.1:{local}");
            }
            variables.insert(name, value);
        }
        for (name, value) in overrides {
            assert!(variables.contains_key(*name), "{} does not set {name}", service.name);
            variables.insert((*name).to_owned(), (*value).to_owned());
        }
        Self { variables, ports }
    }

    /// The health check's command with its URL pointed at the stand-in port.
    fn healthcheck(&self, service: &Service<'_>) -> Vec<String> {
        let check = service.healthcheck().unwrap_or_else(|| panic!("{} has no healthcheck", service.name));
        check
            .into_iter()
            .map(|word| {
                if !word.starts_with("http://") {
                    return word;
                }
                let (host, port, path) = stack::http_url(&word);
                let local = self
                    .ports
                    .get(&port)
                    .unwrap_or_else(|| panic!("{word} asks a port the service does not listen on"));
                assert!(["127.0.0.1", "localhost"].contains(&host.as_str()), "{word} asks another host than its own");
                format!("http://127.0.0.1:{local}{path}")
            })
            .collect()
    }
}

/// `argv` (a Lectern binary and its arguments) with exactly `env`, as compose starts it.
fn spawn(argv: &[String], env: &BTreeMap<String, String>) -> process::Service {
    Launch::named(&argv[0]).args(&argv[1..]).exact_environment(env).spawn()
}

/// Runs a health check command once, with an empty environment; true on exit 0.
async fn healthy(check: &[String]) -> bool {
    let run = Launch::named(&check[0]).args(&check[1..]).exact_environment(BTreeMap::<String, String>::new());
    run.try_run(Duration::from_secs(10)).await.is_some_and(|run| run.code == Some(0))
}

/// Runs `check` until it passes (true) or [`WITHIN`] is over (false); fails early if
/// the service exits.
async fn becomes_healthy(service: &mut process::Service, check: &[String]) -> bool {
    let deadline = Instant::now() + WITHIN;
    while Instant::now() < deadline {
        if healthy(check).await {
            return true;
        }
        service.assert_running("instead of becoming healthy");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// .env.example with every secret replaced by a real one, as an operator fills it in.
fn filled_dotenv() -> BTreeMap<String, String> {
    env_example()
        .into_iter()
        .map(|(name, value)| if is_secret_name(&name) { (name, REAL_SECRET.to_owned()) } else { (name, value) })
        .collect()
}

#[tokio::test]
async fn the_api_healthcheck_asks_its_listen_port_for_a_route_the_api_answers_200_when_ready() {
    let compose = compose();
    let api = compose.service("api");
    let listen = api.environment().get("LECTERN_LISTEN").cloned().expect("the api sets LECTERN_LISTEN");
    let check = api.healthcheck().expect("the api has a healthcheck");
    assert_eq!(check.get(..2), Some(&["lectern-api".to_owned(), "healthcheck".to_owned()][..]), "{check:?}");
    let url = check.iter().position(|word| word == "--url").and_then(|at| check.get(at + 1)).expect("--url URL");
    let (host, port, path) = stack::http_url(url);
    assert_eq!(host, "127.0.0.1", "the check must ask the container itself");
    assert_eq!(port, port_of(&listen), "the check asks port {port}, the api listens on {listen}");
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = app.http.get(app.url(&path)).send().await.expect("the app answers");
    let local_check: Vec<String> =
        check.iter().map(|word| if word == url { app.url(&path) } else { word.clone() }).collect();

    assert_eq!(reply.status().as_u16(), 200, "GET {path} on a ready api");
    assert!(healthy(&local_check).await, "{local_check:?} fails against a ready api");
}

#[tokio::test]
async fn the_api_started_as_compose_starts_it_with_real_secrets_passes_its_healthcheck() {
    let compose = compose();
    let api = compose.service("api");
    let db = TestDatabase::create().await;
    let local = LocalEnvironment::of(&api, &filled_dotenv(), &[("DATABASE_URL", &db.url)]);
    let check = local.healthcheck(&api);

    let mut service = spawn(&api.argv(), &local.variables);
    let healthy = becomes_healthy(&mut service, &check).await;

    assert!(healthy, "{check:?} never passed within {WITHIN:?}; the api's log:\n{}", service.stderr());
}

#[tokio::test]
async fn an_unedited_env_example_keeps_the_api_from_starting_in_production() {
    let compose = compose();
    let api = compose.service("api");
    let db = TestDatabase::create().await;
    let local = LocalEnvironment::of(&api, &env_example(), &[("DATABASE_URL", &db.url)]);

    let ended = spawn(&api.argv(), &local.variables).ended_within(WITHIN).await;

    let ended = ended.unwrap_or_else(|api| panic!("the api served with the placeholder secrets:\n{}", api.stderr()));
    assert_ne!(ended.code, Some(0), "{}", ended.stderr);
    assert!(
        ["LECTERN_KEY_PEPPER", "LECTERN_CURSOR_SECRET"].iter().any(|name| ended.stderr.contains(name)),
        "the refusal names neither secret:\n{}",
        ended.stderr
    );
}

#[tokio::test]
async fn the_projector_started_as_compose_starts_it_passes_its_healthcheck_on_the_metrics_port() {
    let compose = compose();
    let projector = compose.service("projector");
    let environment = projector.environment();
    let metrics = environment.get("LECTERN_PROJECTOR_METRICS_LISTEN").expect("the projector sets its metrics listen");
    let check = projector.healthcheck().expect("the projector has a healthcheck");
    assert_eq!(check.get(..2), Some(&["lectern-projector".to_owned(), "healthcheck".to_owned()][..]), "{check:?}");
    let url = check.iter().find(|word| word.starts_with("http://")).expect("the check names a URL");
    let (_, port, path) = stack::http_url(url);
    assert_eq!(port, port_of(metrics), "the check asks port {port}, the projector serves health on {metrics}");
    // The routes `lectern-projector run` serves beside /metrics.
    assert!(["/readyz", "/healthz"].contains(&path.as_str()), "the projector does not serve {path}");
    let run_help = cli::help("lectern-projector", &["run"]).expect("lectern-projector run --help");
    assert!(run_help.flags.contains("--metrics-listen"), "`lectern-projector run` serves no health endpoint yet");
    let nats = TestNats::start().await;
    let db = TestDatabase::create().await;
    let local =
        LocalEnvironment::of(&projector, &filled_dotenv(), &[("DATABASE_URL", &db.url), ("NATS_URL", &nats.url)]);
    let check = local.healthcheck(&projector);

    let mut service = spawn(&projector.argv(), &local.variables);
    let healthy = becomes_healthy(&mut service, &check).await;

    assert!(healthy, "{check:?} never passed within {WITHIN:?}; the projector's log:\n{}", service.stderr());
}
