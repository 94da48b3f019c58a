//! The command line: how much data, how long each measurement runs, where the table goes.

use std::path::PathBuf;
use std::time::Duration;

use crate::nemesis::faults::Topology;
use crate::nemesis::schedule::Schedule;

pub const USAGE: &str = "\
usage: lectern-bench [--scale small|full] [--contacts N] [--output FILE] [--duration SECS] [--soak SECS] [--projector-only] [--feed [--baseline-projector FILE]] [--replicas] [--verify] [--webhooks] [--long-polls] [--nemesis --minutes N [--seed S] [--schedule N | --replay TEXT] [--topology single|scale]] [--keep] [--no-build]

  --scale full       1,000,000 contacts in 1,000 workspaces (999 of about 800, one of 200,000)
                     and 200,000 items; 10 s per load run, 20 s of steady publishing (default)
  --scale small      one tenth of everything; 5 s per load run, 10 s of steady publishing
  --contacts N       total contacts; workspaces (N / 1,000), the big workspace (N / 5) and
                     items (N / 5) follow
  --output FILE      where the markdown table is written (default bench/results.md)
  --duration SECS    length of each wrk and pgbench run
  --soak SECS        instead of the comparisons, the soak of issue 6: after the same load,
                     every scenario's requests mixed at 64 connections for SECS while the
                     projector absorbs 2,000 events/s; counts answers by status and checks
                     RSS stays flat (default output bench/soak.md)
  --projector-only   the drain, publish→visible and plain-SQL measurements, not the API's
                     (about half the time; for comparing projector builds)
  --feed             instead of the comparisons, the changes feed's scenarios after the same
                     load: catch-up against a listing traversal, an empty poll against
                     pgbench running the feed's SQL, publish→visible through the feed, a long
                     poll's wake-up, the drain against plain SQL (default output bench/feed.md)
  --baseline-projector FILE
                     with --feed: a lectern-projector built from another checkout; the drain
                     then alternates this checkout's projector (A) and that one (B), A B A B A,
                     each into a database migrated by the `lectern-api migrate` beside it
  --replicas         instead of the comparisons, reads from a streaming replica (issue 27): the
                     same load into a private primary (initdb, the tuning of the server below,
                     wal_level replica), a standby made by pg_basebackup -R, then an API on the
                     primary alone (A) against one reading the standby (B): wrk A B A B on a first
                     page, a deep page and a retrieve, with each server's CPU per request;
                     publish→visible through each one's feed; and the projector's drain from a
                     three-node NATS cluster at R3 against a single node (default output
                     bench/replicas.md)
  --verify           instead of the comparisons, the read model checked against the stream
                     and rebuilt from it (issue 28): the backlog drained by the projector, then
                     `lectern-projector verify` twice over the same history, its rate against
                     the drain's; then `rebuild` with one contact in 100 corrupted, its rate
                     against the drain's, its swap, and the API's retrieve p99 under wrk
                     during it against without (default output bench/verify.md)
  --webhooks         instead of the comparisons, commit → delivery latency of webhook deliveries:
                     single-row commits to 8 workspaces with an endpoint each, delivered by the
                     release API to a receiver on loopback, against the same commits heard by a
                     plain LISTEN; no load, NATS, wrk or pgbench (default output bench/webhooks.md)
  --long-polls       instead of the comparisons, the release API's resident memory while 10,000
                     long polls wait (200 workspaces × 50, a connection each) and after they are
                     answered, three rounds against one process, with another workspace's listing
                     timed meanwhile; no load, NATS, wrk or pgbench (default output
                     bench/long-polls.md)
  --nemesis          instead of the comparisons, random schedules of faults (crashes, failovers,
                     restores, kills, NATS restarts, transactions held open) against a private
                     deployment while publishers and feed clients run, each schedule followed by
                     a check of every promise; a violation prints the seed and the schedule
                     (default output bench/nemesis.md)
  --minutes N        with --nemesis: how long to draw schedules (default 10)
  --seed S           with --nemesis: the seed the schedules are drawn from (default: the clock);
                     the same seed replays the same schedules
  --schedule N       with --nemesis: start at schedule N of the seed
  --replay TEXT      with --nemesis: strike the one schedule TEXT names, as a violation
                     prints it ('0.756s projector-kill-9, 0.887s dump-restored-twice'); with the
                     violation's --seed, the publisher sends the same events
  --topology T       with --nemesis: single (one nats-server, one projector; the default)
                     or scale (a three-node NATS cluster at R3, two projectors, the second
                     API process reading from a streaming replica)
  --keep             keep the benchmark databases and the work directory (with --replicas, the
                     private servers' directories, stopped)
  --no-build         use target/release/lectern-{api,projector} as they are (by default
                     `cargo build --release` brings them up to date with the checkout first)

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust; LECTERN_BENCH_DATABASE_URL
overrides), nats-server (/usr/sbin/nats-server or LECTERN_TEST_NATS_SERVER), wrk and pgbench;
--replicas also PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup: the newest
/usr/lib/postgresql/<version>/bin, or LECTERN_TEST_PG_BIN), run as the postgres system user
(LECTERN_TEST_PG_USER) when the bench runs as root.";

/// What `--nemesis` runs.
#[derive(Clone, Debug)]
pub struct NemesisOptions {
    pub minutes: u64,
    pub seed: u64,
    pub first_schedule: u64,
    pub replay: Option<Schedule>,
    pub topology: Topology,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Small,
    Full,
}

impl Scale {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Full => "full",
        }
    }
}

/// What one run of the benchmark does.
#[derive(Clone, Debug)]
pub struct Options {
    pub scale: Scale,
    /// Total contacts; everything else is sized from it.
    pub contacts: usize,
    pub output: PathBuf,
    /// Length of each wrk and pgbench run.
    pub run_for: Duration,
    /// Length of the steady publish→visible measurement.
    pub steady_for: Duration,
    /// Run the soak for this long instead of the comparisons.
    pub soak_for: Option<Duration>,
    /// Measure the write path only, leaving out the API scenarios.
    pub projector_only: bool,
    /// Run the changes feed's scenarios instead of the comparisons.
    pub feed: bool,
    /// Another build's projector for the feed run's alternated drains; the `lectern-api`
    /// beside it migrates its databases.
    pub baseline_projector: Option<PathBuf>,
    /// Measure reads from a streaming replica instead of the comparisons.
    pub replicas: bool,
    /// Measure `lectern-projector verify` instead of the comparisons.
    pub verify: bool,
    /// Measure webhook deliveries instead of the comparisons.
    pub webhooks: bool,
    /// Measure waiting long polls' memory instead of the comparisons.
    pub long_polls: bool,
    /// Run the nemesis instead of the comparisons.
    pub nemesis: Option<NemesisOptions>,
    /// Keep the databases and the work directory for inspection.
    pub keep: bool,
    /// Build the release binaries first (a no-op when they are current).
    pub build: bool,
    /// The arguments as given, for the report.
    pub command_line: String,
}

impl Options {
    /// `Ok(None)` when help was asked for.
    pub fn parse(args: Vec<String>) -> Result<Option<Self>, String> {
        let mut scale = Scale::Full;
        let mut contacts = None;
        let mut output = None;
        let mut run_for = None;
        let mut soak_for = None;
        let mut keep = false;
        let mut projector_only = false;
        let mut feed = false;
        let mut baseline_projector = None;
        let mut replicas = false;
        let mut verify = false;
        let mut webhooks = false;
        let mut long_polls = false;
        let mut build = true;
        let mut nemesis = false;
        let mut minutes = None;
        let mut seed = None;
        let mut topology = None;
        let mut first_schedule = None;
        let mut replay = None;
        let command_line = args.join(" ");
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "--scale" => {
                    scale = match value("--scale")?.as_str() {
                        "small" => Scale::Small,
                        "full" => Scale::Full,
                        other => return Err(format!("--scale must be small or full, not {other:?}")),
                    }
                }
                "--contacts" => contacts = Some(number(&value("--contacts")?, "--contacts", 2_000)?),
                "--output" => output = Some(PathBuf::from(value("--output")?)),
                "--duration" => {
                    run_for = Some(Duration::from_secs(number(&value("--duration")?, "--duration", 1)? as u64))
                }
                "--soak" => soak_for = Some(Duration::from_secs(number(&value("--soak")?, "--soak", 10)? as u64)),
                "--keep" => keep = true,
                "--projector-only" => projector_only = true,
                "--feed" => feed = true,
                "--baseline-projector" => baseline_projector = Some(PathBuf::from(value("--baseline-projector")?)),
                "--replicas" => replicas = true,
                "--verify" => verify = true,
                "--webhooks" => webhooks = true,
                "--long-polls" => long_polls = true,
                "--no-build" => build = false,
                "--nemesis" => nemesis = true,
                "--minutes" => minutes = Some(number(&value("--minutes")?, "--minutes", 1)? as u64),
                "--seed" => seed = Some(number(&value("--seed")?, "--seed", 0)? as u64),
                "--schedule" => first_schedule = Some(number(&value("--schedule")?, "--schedule", 0)? as u64),
                "--replay" => {
                    replay =
                        Some(Schedule::parse(&value("--replay")?).map_err(|problem| format!("--replay: {problem}"))?)
                }
                "--topology" => {
                    topology = match value("--topology")?.as_str() {
                        "single" => Some(Topology::Single),
                        "scale" => Some(Topology::Scale),
                        other => return Err(format!("--topology must be single, not {other:?}")),
                    }
                }
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        if baseline_projector.is_some() && !feed {
            return Err("--baseline-projector goes with --feed".to_owned());
        }
        if feed && (soak_for.is_some() || projector_only) {
            return Err("--feed is a run of its own, not with --soak or --projector-only".to_owned());
        }
        if replicas && (feed || soak_for.is_some() || projector_only) {
            return Err("--replicas is a run of its own, not with --feed, --soak or --projector-only".to_owned());
        }
        if verify && (feed || replicas || soak_for.is_some() || projector_only) {
            return Err(
                "--verify is a run of its own, not with --feed, --replicas, --soak or --projector-only".to_owned()
            );
        }
        if webhooks && (feed || replicas || verify || soak_for.is_some() || projector_only) {
            return Err(
                "--webhooks is a run of its own, not with --feed, --replicas, --verify, --soak or --projector-only"
                    .to_owned(),
            );
        }
        if long_polls && (webhooks || feed || replicas || verify || soak_for.is_some() || projector_only) {
            return Err(
                "--long-polls is a run of its own, not with --webhooks, --feed, --replicas, --verify, --soak or \
                 --projector-only"
                    .to_owned(),
            );
        }
        if !nemesis
            && (minutes.is_some()
                || seed.is_some()
                || topology.is_some()
                || first_schedule.is_some()
                || replay.is_some())
        {
            return Err("--minutes, --seed, --schedule, --replay and --topology go with --nemesis".to_owned());
        }
        if nemesis && (long_polls || webhooks || feed || replicas || verify || soak_for.is_some() || projector_only) {
            return Err("--nemesis is a run of its own".to_owned());
        }
        let nemesis = nemesis.then(|| NemesisOptions {
            minutes: minutes.unwrap_or(10),
            seed: seed.unwrap_or_else(|| chrono::Utc::now().timestamp().unsigned_abs()),
            topology: topology.unwrap_or(Topology::Single),
            first_schedule: first_schedule.unwrap_or(0),
            replay,
        });
        let (default_contacts, default_run, steady_for) = match scale {
            Scale::Full => (1_000_000, 10, 20),
            Scale::Small => (100_000, 5, 10),
        };
        Ok(Some(Self {
            scale,
            contacts: contacts.unwrap_or(default_contacts),
            output: output.unwrap_or_else(|| {
                PathBuf::from(match (soak_for.is_some(), feed, replicas, verify) {
                    _ if nemesis.is_some() => "bench/nemesis.md",
                    _ if webhooks => "bench/webhooks.md",
                    _ if long_polls => "bench/long-polls.md",
                    (true, ..) => "bench/soak.md",
                    (false, true, ..) => "bench/feed.md",
                    (false, false, true, _) => "bench/replicas.md",
                    (false, false, false, true) => "bench/verify.md",
                    (false, false, false, false) => "bench/results.md",
                })
            }),
            run_for: run_for.unwrap_or(Duration::from_secs(default_run)),
            steady_for: Duration::from_secs(steady_for),
            soak_for,
            projector_only,
            feed,
            baseline_projector,
            replicas,
            verify,
            webhooks,
            long_polls,
            nemesis,
            keep,
            build,
            command_line: format!("cargo run --release -p lectern-bench -- {command_line}").trim_end().to_owned(),
        }))
    }
}

fn number(text: &str, name: &str, min: usize) -> Result<usize, String> {
    text.replace(['_', ','], "")
        .parse::<usize>()
        .ok()
        .filter(|value| *value >= min)
        .ok_or_else(|| format!("{name} must be a whole number of at least {min}, not {text:?}"))
}
