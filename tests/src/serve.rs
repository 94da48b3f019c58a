//! `lectern-api serve` as a process: on free ports, against the database a test names,
//! with the tests' pepper and JSON logs, and whatever else the test sets through
//! [`ServeOptions`]; started once it says it listens, at the addresses it logged.

use std::time::Duration;

use crate::binaries::Run;
use crate::process::{Launch, Metrics, Service, Starting};
use crate::seed::TEST_PEPPER;
use crate::Reply;

/// How long `serve` may take to start or to stop before the test fails instead of hanging.
pub const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// How a [`Serve`] is started: [`Serve::on`], then settings, then [`ServeOptions::start`].
pub type ServeOptions = Starting<Serve>;

impl ServeOptions {
    /// Webhook leases of `ms` milliseconds: short, so that a process claims endpoints (and
    /// takes over those of one killed) within a test's patience.
    pub fn webhook_lease_ms(self, ms: u64) -> Self {
        self.env("LECTERN_WEBHOOK_LEASE_MS", &ms.to_string())
    }

    /// Webhook targets on private addresses allowed: the tests' receivers listen on loopback.
    pub fn private_webhook_targets(self) -> Self {
        self.env("LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "1")
    }

    /// Starts `serve` and waits until it logs that it listens.
    pub async fn start(self) -> Serve {
        let mut service = self.launch.spawn();
        let listening =
            service.wait_for_log(SERVE_WITHIN, |record| record["fields"]["message"] == "lectern-api listening").await;
        let address = |name: &str| {
            listening["fields"][name].as_str().unwrap_or_else(|| panic!("no {name} address in {listening}")).to_owned()
        };
        let (api, operations) = (address("address"), address("metrics"));
        Serve { service, api, operations, http: reqwest::Client::new() }
    }
}

/// A running `lectern-api serve`.
pub struct Serve {
    pub service: Service,
    /// `host:port` of the public listener.
    pub api: String,
    /// `host:port` of the operations listener (health, readiness, metrics).
    pub operations: String,
    pub http: reqwest::Client,
}

impl Serve {
    /// `serve` against `database_url`, both listeners on free loopback ports, with the
    /// tests' pepper (so keys made by [`crate::seed::create_key`] authenticate) and JSON logs.
    pub fn on(database_url: &str) -> ServeOptions {
        let launch = Launch::api().arg("serve").json_logs().envs(&[
            ("DATABASE_URL", database_url),
            ("LECTERN_LISTEN", "127.0.0.1:0"),
            ("LECTERN_METRICS_LISTEN", "127.0.0.1:0"),
            ("LECTERN_KEY_PEPPER", TEST_PEPPER),
        ]);
        ServeOptions::new(launch)
    }

    pub fn api_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    pub fn operations_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.operations)
    }

    /// GET `path` on the public address, with `key` as the API key if there is one.
    pub async fn get(&self, key: Option<&str>, path: &str) -> Reply {
        let mut request = self.http.get(self.api_url(path));
        if let Some(key) = key {
            request = request.header("X-API-Key", key);
        }
        Reply::read(request.send().await.expect("the request reaches serve")).await
    }

    /// GET `path` on the operations address.
    pub async fn get_operations(&self, path: &str) -> Reply {
        Reply::read(self.http.get(self.operations_url(path)).send().await.expect("the request reaches serve")).await
    }

    /// `/metrics` of the operations address, which must answer 200.
    pub async fn metrics(&self) -> Metrics {
        let reply = self.get_operations("/metrics").await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        Metrics::parse(&reply.text)
    }

    /// Sends SIGTERM and returns at once; [`Serve::ended`] waits for the exit.
    pub fn signal_stop(&self) {
        self.service.signal("TERM");
    }

    /// Waits for a process told to stop to exit with 0.
    pub async fn ended(self) -> Run {
        let ended = self.service.wait(SERVE_WITHIN).await;
        assert_eq!(ended.code, Some(0), "serve did not exit with 0 after SIGTERM:\n{}", ended.stderr);
        ended
    }

    /// SIGTERM, and exit 0.
    pub async fn stop(self) -> Run {
        self.service.stop(SERVE_WITHIN).await
    }

    /// SIGKILL: no shutdown, nothing given back (webhook leases run out instead).
    pub async fn kill(self) {
        self.service.kill(SERVE_WITHIN).await;
    }
}
