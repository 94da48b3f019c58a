//! The nemesis: random schedules of faults against a private deployment while publishers
//! and feed clients run, then a check of every promise once the stack settles.
//!
//! - [`faults`]: the catalogue, written once as data; [`schedule`]: schedules drawn from a
//!   seed, replayable one by one.
//! - [`deployment`]: the private primary, standbys, forwarder, nats-server, projector and
//!   API processes; [`strike`]: how each fault is struck against them.
//! - [`publisher`]: the upstream's steady events and the ledger of last versions;
//!   [`clients`]: integrations following the feed.
//! - [`check`]: the promises, checked after each schedule; [`report`]: the run's table.
//!
//! The deployment is built from the end-to-end tests' harness (`lectern_tests`), the same
//! private servers and processes the fault tests strike, so a harness step that fails ends
//! the run with its message: the nemesis is a test, run longer.

#![expect(clippy::expect_used, reason = "a deployment step that fails ends the run with its message, as in the tests")]

pub mod check;
pub mod clients;
pub mod deployment;
pub mod faults;
pub mod publisher;
pub mod report;
pub mod schedule;
pub mod strike;
pub mod webhooks;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lectern_fixtures::prng::Prng;
use tokio::sync::Mutex;

use clients::{FeedClient, Shared, Style};
use deployment::Deployment;
use faults::{FaultKind, Topology};
use publisher::Ledger;
use schedule::Schedules;

/// Each schedule's window: its faults strike within it, then the stack is healed and checked.
pub const WINDOW: Duration = Duration::from_secs(20);

/// What the checkers found, gathered from every task: findings, and findings about one
/// record, which events the projector counted lost excuse (see [`Findings::take`]).
#[derive(Clone, Default)]
pub struct Findings(Arc<std::sync::Mutex<Found>>);

/// Findings, and findings about one record (its id, the finding).
type Found = (Vec<String>, Vec<(String, String)>);

impl Findings {
    pub fn add(&self, finding: String) {
        if let Ok(mut findings) = self.0.lock() {
            findings.0.push(finding);
        }
    }

    /// A finding about record `id`: a record with an event the stream no longer held when
    /// the database needed it again may be at an older version than a client was served,
    /// and an older version the upstream sends again is then applied and served.
    pub fn add_about(&self, id: &str, finding: String) {
        if let Ok(mut findings) = self.0.lock() {
            findings.1.push((id.to_owned(), finding));
        }
    }

    /// Every finding so far, but those about a record in `lost`.
    fn take(&self, lost: &BTreeSet<String>) -> Vec<String> {
        let Ok(mut findings) = self.0.lock() else { return Vec::new() };
        let (general, about) = std::mem::take(&mut *findings);
        general
            .into_iter()
            .chain(about.into_iter().filter(|(id, _)| !lost.contains(id)).map(|(_, finding)| finding))
            .collect()
    }
}

/// How long after a fault ends a 503 may still be answered: the documented recoveries
/// (connections opened again, a restarted process ready) take seconds.
pub const RECOVERS_WITHIN: Duration = Duration::from_secs(30);

/// What the faults tell the clients.
#[derive(Clone)]
pub struct Strikes {
    /// History-forking faults begun so far, and ended so far: a client whose sync overlaps
    /// one that was underway may rightly be told to start over.
    forks_begun: Arc<AtomicU64>,
    forks_ended: Arc<AtomicU64>,
    /// Faults being struck now, and when the last one ended.
    window: Arc<std::sync::Mutex<(u32, Option<Instant>)>>,
    /// When the run began: findings give their times from it.
    pub epoch: Instant,
    /// Whether a fault has aged events out of the stream: only then may events be lost
    /// (counted by the projector) and `verify` say it cannot tell.
    pub aged_out: Arc<AtomicBool>,
}

impl Default for Strikes {
    fn default() -> Self {
        Self {
            forks_begun: Arc::default(),
            forks_ended: Arc::default(),
            window: Arc::default(),
            epoch: Instant::now(),
            aged_out: Arc::default(),
        }
    }
}

impl Strikes {
    fn begin(&self, forks: bool) {
        if forks {
            self.forks_begun.fetch_add(1, Ordering::SeqCst);
        }
        if let Ok(mut window) = self.window.lock() {
            window.0 += 1;
        }
    }

    fn end(&self, forks: bool) {
        if forks {
            self.forks_ended.fetch_add(1, Ordering::SeqCst);
        }
        if let Ok(mut window) = self.window.lock() {
            window.0 = window.0.saturating_sub(1);
            window.1 = Some(Instant::now());
        }
    }

    /// History-forking faults begun so far.
    pub fn forks_begun(&self) -> u64 {
        self.forks_begun.load(Ordering::SeqCst)
    }

    /// History-forking faults ended so far.
    pub fn forks_ended(&self) -> u64 {
        self.forks_ended.load(Ordering::SeqCst)
    }

    /// Whether a fault is being struck, or one ended within [`RECOVERS_WITHIN`]: the window
    /// in which the docs allow a 503.
    pub fn in_a_fault_window(&self) -> bool {
        self.window
            .lock()
            .is_ok_and(|window| window.0 > 0 || window.1.is_some_and(|ended| ended.elapsed() <= RECOVERS_WITHIN))
    }
}

/// One nemesis run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    pub topology: Topology,
    /// Schedules are drawn until this much time has passed.
    pub run_for: Duration,
    /// At most this many schedules (the tests' short run).
    pub most_schedules: Option<u64>,
    /// The first schedule drawn: a replay of schedule N starts there.
    pub first_schedule: u64,
    /// Instead of drawing schedules, strike this one (as a violation printed it).
    pub replay: Option<schedule::Schedule>,
    /// Each schedule strikes within this window, then the stack is healed and checked.
    pub window: Duration,
}

/// A promise found broken, with what replays it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub schedule: String,
    pub finding: String,
}

/// What a run did and found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub schedules: u64,
    pub struck: BTreeMap<FaultKind, u64>,
    pub events: u64,
    pub redelivered: u64,
    pub out_of_order: u64,
    pub records: usize,
    pub syncs: u64,
    pub start_overs: u64,
    pub late_start_overs: u64,
    pub unavailable: u64,
    /// Webhook deliveries the receiver took.
    pub deliveries: usize,
    /// Records with an event the projector recorded as lost (the stream no longer held it
    /// when the database needed it again), at the last check.
    pub lost_records: usize,
    pub violations: Vec<Violation>,
    pub elapsed: Duration,
}

/// Runs the nemesis: the deployment, the publisher and the clients, then schedule after
/// schedule of faults, each followed by the check of every promise.
pub async fn run(settings: &Settings) -> Outcome {
    let started = Instant::now();
    let mut deployment = Deployment::start(settings.topology).await;
    let findings = Findings::default();
    let strikes = Strikes::default();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut tasks = vec![tokio::spawn(publisher::publish(
        deployment.nats.url(),
        deployment.tenants.clone(),
        ledger.clone(),
        settings.seed,
    ))];
    let shared = Shared {
        endpoints: deployment.endpoints.clone(),
        tenants: deployment.tenants.clone(),
        findings: findings.clone(),
        strikes: strikes.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("an HTTP client"),
        cursor_secrets: deployment.cursor_secrets_ever.clone(),
    };
    let mut clients = Vec::new();
    let receiver = Arc::new(lectern_tests::webhooks::Receiver::start().await);
    webhooks::register(&mut deployment, &receiver).await;
    let mut hook_clients = Vec::new();
    for tenant in 0..deployment.tenants.len() {
        for resource in ["contacts", "items"] {
            for style in Style::ALL {
                let client = Arc::new(Mutex::new(FeedClient::new(tenant, resource, style)));
                let seed = prng_seed(settings.seed, clients.len());
                tasks.push(tokio::spawn(clients::follow(client.clone(), shared.clone(), seed)));
                clients.push(client);
            }
            let client = Arc::new(Mutex::new(FeedClient::new(tenant, resource, Style::Webhook)));
            let seed = prng_seed(settings.seed, 1_000 + hook_clients.len());
            tasks.push(tokio::spawn(webhooks::follow_deliveries(
                client.clone(),
                shared.clone(),
                receiver.clone(),
                seed,
            )));
            hook_clients.push(client);
        }
    }

    let mut outcome = Outcome::default();
    // Records with an event the projector counted lost, in any check so far.
    let mut lost_so_far = BTreeSet::new();
    // A replay strikes the one schedule it names; otherwise schedules are drawn from the seed.
    let schedules: Box<dyn Iterator<Item = schedule::Schedule> + Send> = match &settings.replay {
        Some(schedule) => Box::new(std::iter::once(schedule.clone())),
        None => Box::new(
            Schedules::new(settings.seed, settings.topology, settings.window).skip(settings.first_schedule as usize),
        ),
    };
    for schedule in schedules {
        let out_of_time = started.elapsed() >= settings.run_for;
        if out_of_time || settings.most_schedules.is_some_and(|most| outcome.schedules >= most) {
            break;
        }
        eprintln!("nemesis: seed {} {schedule} (from {:?} into the run)", settings.seed, strikes.epoch.elapsed());
        let mut prng = Prng::new(&[settings.seed, schedule.index, 0x5e7]);
        let began = tokio::time::Instant::now();
        for step in &schedule.steps {
            tokio::time::sleep_until(began + step.at).await;
            strike::strike(&mut deployment, step.fault, &mut prng, &strikes, &findings).await;
            *outcome.struck.entry(step.fault).or_default() += 1;
        }
        tokio::time::sleep_until(began + settings.window).await;
        for crashed in deployment.crashed() {
            findings.add(crashed);
        }
        deployment.heal().await;

        // Everyone held between two steps while the promises are checked.
        let ledger = ledger.lock().await;
        let mut held = Vec::with_capacity(clients.len());
        for client in &clients {
            held.push(client.lock().await);
        }
        let (listings, lost) =
            check::listings_reach_the_ledger(&shared.http, &deployment, &ledger, &lost_so_far, &findings).await;
        lost_so_far.clone_from(&lost);
        outcome.lost_records = lost.len();
        if !lost.is_empty() && !strikes.aged_out.load(Ordering::SeqCst) {
            findings.add(format!(
                "the projector found events lost ({} records behind) though no fault aged events out of the stream",
                lost.len()
            ));
        }
        // One deadline for every client: when none can sync (every key refused), the check
        // still ends within it rather than once per client.
        let deadline = Instant::now() + check::SETTLES_WITHIN;
        for client in &mut held {
            let listed = listings.get(&(client.tenant, client.resource)).cloned().unwrap_or_default();
            check::mirror_equals_the_listing(client, &shared, &listed, &lost, deadline).await;
        }
        drop(held);
        webhooks::mirrors_follow_the_deliveries(&hook_clients, &listings, &lost, &shared, deadline).await;
        check::verify_agrees(&deployment, strikes.aged_out.load(Ordering::SeqCst), &findings).await;
        let found = findings.take(&lost);
        if !found.is_empty() {
            eprintln!("nemesis: the database's histories: {}", deployment.histories().await);
            eprintln!("nemesis: the keys: {}", deployment.keys_report().await);
            for line in deployment.history_log_lines() {
                eprintln!("nemesis: {line}");
            }
        }
        for finding in found {
            eprintln!("nemesis: VIOLATION (seed {}, {schedule}): {finding}", settings.seed);
            outcome.violations.push(Violation { schedule: schedule.to_string(), finding });
        }
        outcome.schedules += 1;
        outcome.events = ledger.events;
        outcome.redelivered = ledger.redelivered;
        outcome.out_of_order = ledger.out_of_order;
        outcome.records = ledger.records.len();
    }
    for task in &tasks {
        task.abort();
    }
    outcome.deliveries = receiver.count();
    for client in clients.iter().chain(&hook_clients) {
        let client = client.lock().await;
        outcome.syncs += client.syncs;
        outcome.start_overs += client.start_overs;
        outcome.late_start_overs += client.late_start_overs;
        outcome.unavailable += client.unavailable;
    }
    outcome.elapsed = started.elapsed();
    outcome
}

fn prng_seed(seed: u64, index: usize) -> u64 {
    lectern_fixtures::prng::hash(&[seed, index as u64, 0xc11e])
}
