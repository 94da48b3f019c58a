//! Integrations following the changes feed through the faults, as the contract tells them
//! to: keep a mirror, keep the token, start over when told to. Some long-poll, some come
//! back after a pause, some drop everything now and then and sync from scratch.
//!
//! Each client checks as it goes what can only be seen as it goes: a record in its mirror
//! never goes back to an older version, and it is told to start over only after a fault
//! that may fork the database's history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lectern_api::feed::token::FeedScope;
use lectern_fixtures::prng::Prng;
use lectern_tests::app::urlencode;
use serde_json::Value;
use tokio::sync::Mutex;

use super::deployment::{Endpoints, Tenant};
use super::publisher::version_in;
use super::{Findings, Strikes};

/// How long a long poll asks to wait.
const WAIT_SECONDS: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    LongPoll,
    Pauses,
    StartsAgain,
    /// Pulls only when a webhook delivery announces a change ([`super::webhooks`]).
    Webhook,
}

impl Style {
    /// The styles of the clients that follow the feed by themselves.
    pub const ALL: [Self; 3] = [Self::LongPoll, Self::Pauses, Self::StartsAgain];
}

/// One integration's copy of one resource of one workspace.
pub struct FeedClient {
    pub name: String,
    pub tenant: usize,
    pub resource: &'static str,
    style: Style,
    pub token: Option<String>,
    pub mirror: BTreeMap<String, Value>,
    /// The highest version of each record this client has been served since it last
    /// started over, deleted ones included.
    highest: BTreeMap<String, i64>,
    /// History-forking faults ended when the request that handed out the token was sent.
    forks_ended_at_token: u64,
    /// History-forking faults ended when it sent the first request of its current sync.
    forks_ended_at_start: u64,
    /// When it sent the first request of its current sync.
    began_at: Option<std::time::Instant>,
    caught_up: bool,
    /// Set while the checker brings it up to date: no waiting, no dropping its mirror.
    pub checked: bool,
    pub syncs: u64,
    pub start_overs: u64,
    /// Start-overs with a token handed out after the last fork (see [`FeedClient::step`]).
    pub late_start_overs: u64,
    pub unavailable: u64,
}

/// What every client shares.
#[derive(Clone)]
pub struct Shared {
    pub endpoints: Endpoints,
    pub tenants: Vec<Tenant>,
    pub findings: Findings,
    pub strikes: Strikes,
    pub http: reqwest::Client,
    pub cursor_secrets: super::deployment::CursorSecretsEver,
}

impl FeedClient {
    pub fn new(tenant: usize, resource: &'static str, style: Style) -> Self {
        Self {
            name: format!("{style:?} client of workspace {tenant}'s {resource}"),
            tenant,
            resource,
            style,
            token: None,
            mirror: BTreeMap::new(),
            highest: BTreeMap::new(),
            forks_ended_at_token: 0,
            forks_ended_at_start: 0,
            began_at: None,
            caught_up: false,
            checked: false,
            syncs: 0,
            start_overs: 0,
            late_start_overs: 0,
            unavailable: 0,
        }
    }

    /// The history `token` names, opened as the API opens it, for a violation's report.
    fn history_in(&self, token: &str, shared: &Shared) -> Option<i64> {
        let scope = FeedScope { resource: self.resource, workspace_id: shared.tenants[self.tenant].workspace };
        shared.cursor_secrets.tokens()?.open(token, scope).ok()?.history
    }

    fn start_over(&mut self) {
        self.token = None;
        self.mirror.clear();
        self.highest.clear();
        self.caught_up = false;
    }

    /// One request and what the client does with its answer; how long it then rests.
    pub async fn step(&mut self, shared: &Shared, prng: &mut Prng) -> Duration {
        let Some(base) = shared.endpoints.pick(prng.below(1_000)) else { return Duration::from_millis(200) };
        let mut url = format!("{base}/v1/{}/changes?limit=100", self.resource);
        if let Some(token) = &self.token {
            url.push_str(&format!("&since={}", urlencode(token)));
        }
        if self.caught_up && self.style == Style::LongPoll && !self.checked {
            url.push_str(&format!("&wait={WAIT_SECONDS}"));
        }
        let forks_ended_before = shared.strikes.forks_ended();
        let sent = std::time::Instant::now();
        let key = &shared.tenants[self.tenant].key;
        let Ok(response) = shared.http.get(&url).header("X-API-Key", key).send().await else {
            return Duration::from_millis(200);
        };
        let status = response.status().as_u16();
        let Ok(body) = response.json::<Value>().await else {
            if status >= 500 && status != 503 {
                shared.findings.add(format!("{}: answered {status} with no JSON body", self.name));
            }
            return Duration::from_millis(200);
        };
        match status {
            200 => self.apply(&body, (forks_ended_before, sent), shared, prng),
            400 if body["error"]["details"]["startOver"] == Value::Bool(true) => {
                // A start-over is a promise broken unless a history-forking fault was underway
                // at some moment since the client began this sync: one begun before the answer,
                // and not ended before the first request. One with no such fault since its
                // token was handed out is counted apart: a page read just before the database
                // moved can still reach a client after it.
                let forks_begun = shared.strikes.forks_begun();
                if forks_begun <= self.forks_ended_at_start {
                    let history = self.token.as_deref().and_then(|token| self.history_in(token, shared));
                    let since = |instant: std::time::Instant| instant.duration_since(shared.strikes.epoch);
                    shared.findings.add(format!(
                        "{}: told to start over at {:?} though no fault forking the database's history was \
                         underway since it began syncing at {:?} (its token named history {history:?}): {body}",
                        self.name,
                        since(std::time::Instant::now()),
                        self.began_at.map(since),
                    ));
                } else if forks_begun <= self.forks_ended_at_token {
                    self.late_start_overs += 1;
                }
                self.start_overs += 1;
                self.start_over();
                Duration::ZERO
            }
            503 | 429 => {
                if status == 503 && !shared.strikes.in_a_fault_window() {
                    shared.findings.add(format!(
                        "{}: answered 503 with no fault struck in the last {} s: {body}",
                        self.name,
                        super::RECOVERS_WITHIN.as_secs()
                    ));
                }
                self.unavailable += 1;
                Duration::from_millis(500)
            }
            _ => {
                shared.findings.add(format!("{}: {url} answered {status}: {body}", self.name));
                Duration::from_millis(500)
            }
        }
    }

    fn apply(
        &mut self,
        page: &Value,
        (forks_ended_before, sent): (u64, std::time::Instant),
        shared: &Shared,
        prng: &mut Prng,
    ) -> Duration {
        for change in page["data"].as_array().into_iter().flatten() {
            let id = change["id"].as_str().unwrap_or_default().to_owned();
            if change["change"] == "upserted" {
                let record = change["record"].clone();
                let version = record["name"].as_str().and_then(version_in).unwrap_or(0);
                if let Some(highest) = self.highest.get(&id).copied().filter(|highest| version < *highest) {
                    // Which histories the token asked in and the page answered with, and when.
                    let asked = self.token.as_deref().and_then(|token| self.history_in(token, shared));
                    let answered = page["syncToken"].as_str().and_then(|token| self.history_in(token, shared));
                    shared.findings.add_about(
                        &id,
                        format!(
                            "{}: record {id} went back from version {highest} to {version} without a start-over, at \
                         {:?} (asked with a token of history {asked:?}, answered with one of {answered:?})",
                            self.name,
                            std::time::Instant::now().duration_since(shared.strikes.epoch),
                        ),
                    );
                }
                let highest = self.highest.entry(id.clone()).or_insert(version);
                *highest = (*highest).max(version);
                self.mirror.insert(id, record);
            } else {
                self.mirror.remove(&id);
            }
        }
        // A token dates from when it was first handed out: a caught-up poll answered from
        // an API process's memory hands the same token back, of the history the process last
        // saw, even when the database has moved to a sibling since. That token is told to
        // start over later, rightly, as it was before the move.
        if let Some(token) = page["syncToken"].as_str().filter(|token| self.token.as_deref() != Some(*token)) {
            if self.token.is_none() {
                self.forks_ended_at_start = forks_ended_before;
                self.began_at = Some(sent);
            }
            self.token = Some(token.to_owned());
            self.forks_ended_at_token = forks_ended_before;
        }
        self.caught_up = page["hasMore"] == Value::Bool(false);
        if !self.caught_up {
            return Duration::ZERO;
        }
        self.syncs += 1;
        if self.checked {
            return Duration::ZERO;
        }
        match self.style {
            Style::LongPoll | Style::Webhook => Duration::ZERO,
            Style::Pauses => Duration::from_millis(prng.below(4_000) as u64),
            Style::StartsAgain => {
                if prng.chance(15) {
                    self.start_over();
                }
                Duration::from_millis(prng.below(2_000) as u64)
            }
        }
    }
}

/// Runs `client` until the task is aborted; the client is locked for each step, so whoever
/// holds it sees it between two requests.
pub async fn follow(client: Arc<Mutex<FeedClient>>, shared: Shared, seed: u64) {
    let mut prng = Prng::new(&[seed]);
    loop {
        let rest = client.lock().await.step(&shared, &mut prng).await;
        tokio::time::sleep(rest).await;
    }
}
