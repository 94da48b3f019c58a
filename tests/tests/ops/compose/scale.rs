//! compose.yaml's `scale` profile, checked on paper: a PostgreSQL primary streaming to a
//! hot-standby replica, a three-node NATS JetStream cluster, and a projector and two APIs
//! on them. What makes it work is spread over compose.yaml and the scripts it mounts
//! (deploy/postgres/): the replica copies the primary as the role the primary's init
//! script creates, the NATS nodes route to one another, the Lectern services name the
//! right servers, and `depends_on` starts them in an order that lets each succeed.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::postgres_settings::command_line_settings;
use crate::stack::{compose, port_of, root, Compose, Service};

pub(super) const PROFILE: &str = "scale";
pub(super) const PRIMARY: &str = "postgres-primary";
pub(super) const REPLICA: &str = "postgres-replica";
pub(super) const NATS_NODES: [&str; 3] = ["nats-1", "nats-2", "nats-3"];
pub(super) const MIGRATE: &str = "migrate-scale";
pub(super) const PROJECTOR: &str = "projector-scale";
pub(super) const APIS: [&str; 2] = ["api-scale-1", "api-scale-2"];

/// Where the postgres image looks for scripts to run on an empty data directory.
const INITDB_DIR: &str = "/docker-entrypoint-initdb.d";

/// Every service of the profile.
pub(super) fn services() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&str> = [PRIMARY, REPLICA, MIGRATE, PROJECTOR].into();
    names.extend(NATS_NODES);
    names.extend(APIS);
    names
}

/// The profile's services that run the Lectern image.
pub(super) fn lectern_services() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&str> = [MIGRATE, PROJECTOR].into();
    names.extend(APIS);
    names
}

/// The value after `flag` (`-h host`) or in it (`--host=host`), by its spellings.
fn flag_value(words: &[String], spellings: &[&str]) -> Option<String> {
    words.iter().enumerate().find_map(|(at, word)| {
        spellings.iter().find_map(|flag| {
            if word == flag {
                words.get(at + 1).cloned()
            } else {
                word.strip_prefix(&format!("{flag}=")).map(str::to_owned)
            }
        })
    })
}

/// The parts of a `postgres://user:password@host:port/database` URL.
#[derive(Debug, PartialEq, Eq)]
struct PostgresUrl {
    user: String,
    password: String,
    host: String,
    port: u16,
    database: String,
}

fn postgres_url(url: &str) -> PostgresUrl {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .unwrap_or_else(|| panic!("{url:?} is not a postgres:// URL"));
    let (userinfo, rest) = rest.rsplit_once('@').unwrap_or_else(|| panic!("{url:?} names no user"));
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let (authority, database) = rest.split_once('/').unwrap_or_else(|| panic!("{url:?} names no database"));
    let database = database.split('?').next().unwrap_or_default();
    let (host, port) = authority
        .rsplit_once(':')
        .map_or((authority, 5432), |(host, port)| (host, port.parse().unwrap_or_else(|_| panic!("{url:?}: bad port"))));
    PostgresUrl {
        user: user.to_owned(),
        password: password.to_owned(),
        host: host.to_owned(),
        port,
        database: database.to_owned(),
    }
}

/// The `scheme://host:port` servers of a comma-separated list, as (host, port).
fn servers(list: &str) -> Vec<(String, u16)> {
    list.split(',')
        .map(|url| {
            let (_, authority) = url.trim().split_once("://").unwrap_or_else(|| panic!("{url:?} has no scheme"));
            let (host, port) = authority.rsplit_once(':').unwrap_or_else(|| panic!("{url:?} names no port"));
            (host.to_owned(), port.parse().unwrap_or_else(|_| panic!("{url:?}: bad port")))
        })
        .collect()
}

/// A bind mount's source as a path on this machine (compose reads it from the root).
fn host_path(source: &str) -> PathBuf {
    root().join(source)
}

/// The script a service's entrypoint runs, mounted from the repository.
fn entrypoint_script(service: &Service<'_>) -> (PathBuf, String) {
    let entrypoint = service.list("entrypoint");
    let program = entrypoint.first().unwrap_or_else(|| panic!("{} has no entrypoint", service.name));
    let (source, _) = service
        .bind_mounts()
        .into_iter()
        .find(|(_, target)| target == program)
        .unwrap_or_else(|| panic!("{}'s entrypoint {program} is not mounted from the repository", service.name));
    let path = host_path(&source);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    (path, text)
}

/// The scripts the primary mounts into the image's init directory, read whole.
fn primary_init_scripts(compose: &Compose) -> Vec<(PathBuf, String)> {
    let mut scripts = Vec::new();
    for (source, target) in compose.service(PRIMARY).bind_mounts() {
        let path = host_path(&source);
        if target.trim_end_matches('/') == INITDB_DIR {
            let entries = std::fs::read_dir(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
            let mut files: Vec<PathBuf> = entries.map(|entry| entry.expect("a directory entry").path()).collect();
            files.sort();
            scripts.extend(files.into_iter().map(|file| (file.clone(), read_file(&file))));
        } else if target.starts_with(&format!("{INITDB_DIR}/")) {
            scripts.push((path.clone(), read_file(&path)));
        }
    }
    scripts
}

fn read_file(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// A shell script's commands: continuation lines joined, comment lines and blanks dropped.
fn shell_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body.trim_end());
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        lines.push(std::mem::take(&mut current));
    }
    lines
}

/// A command line's words, with their quotes taken off.
fn shell_words(line: &str) -> Vec<String> {
    line.split_whitespace().map(|word| word.trim_matches(['"', '\'']).to_owned()).collect()
}

/// The names a shell script expands: `$NAME` and `${NAME...}`.
fn shell_variables(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let name_at = usize::from(rest.starts_with('{'));
        let name: String = rest[name_at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            names.insert(name);
        }
    }
    names
}

/// The role the primary's init scripts create with REPLICATION and LOGIN.
fn replication_role(compose: &Compose) -> String {
    let scripts = primary_init_scripts(compose);
    assert!(!scripts.is_empty(), "{PRIMARY} mounts no init script into {INITDB_DIR}/");
    let mut roles = Vec::new();
    for (_, text) in &scripts {
        // Comment lines (shell and SQL) may name roles too.
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !(line.trim_start().starts_with('#') || line.trim_start().starts_with("-- ")))
            .collect();
        for statement in code.join("\n").split(';') {
            let words: Vec<String> = statement
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| !word.is_empty())
                .map(str::to_ascii_uppercase)
                .collect();
            let Some(at) =
                words.windows(2).position(|pair| pair[0] == "CREATE" && ["ROLE", "USER"].contains(&&*pair[1]))
            else {
                continue;
            };
            let options = &words[at..];
            let login = words[at + 1] == "USER" || options.iter().any(|word| word == "LOGIN");
            if login && options.iter().any(|word| word == "REPLICATION") {
                roles.push(words.get(at + 2).expect("CREATE ROLE names a role").to_ascii_lowercase());
            }
        }
    }
    assert_eq!(roles.len(), 1, "{PRIMARY}'s init scripts create {roles:?}, not one role WITH REPLICATION LOGIN");
    roles.remove(0)
}

/// The words of `pg_basebackup`'s command line in the replica's entrypoint script.
fn base_backup(compose: &Compose) -> Vec<String> {
    let (path, text) = entrypoint_script(&compose.service(REPLICA));
    let lines = shell_lines(&text);
    let line = lines
        .iter()
        .find(|line| line.split_whitespace().next() == Some("pg_basebackup"))
        .unwrap_or_else(|| panic!("{} runs no pg_basebackup", path.display()));
    shell_words(line)
}

/// The `-c name=value` settings of a postgres service, by name.
fn settings(name: &str) -> BTreeMap<String, String> {
    command_line_settings(name).into_iter().collect()
}

/// `service`'s environment variable `name`; the test fails without it.
fn variable(service: &Service<'_>, name: &str) -> String {
    service.environment().remove(name).unwrap_or_else(|| panic!("{} does not set {name}", service.name))
}

/// `docker compose up` without the profile starts what it started before the profile
/// existed: every service of the scaled-out stack is in the profile `scale` and in no
/// other, and the profile holds nothing else.
#[test]
fn the_scale_profile_holds_exactly_the_scaled_out_stack_and_its_services_no_other_profile() {
    let compose = compose();

    let in_profile: BTreeSet<String> = compose
        .services()
        .into_values()
        .filter(|service| service.list("profiles").iter().any(|profile| profile == PROFILE))
        .map(|service| service.name.to_owned())
        .collect();

    let expected: BTreeSet<String> = services().into_iter().map(str::to_owned).collect();
    assert_eq!(in_profile, expected, "the services in `{PROFILE}`");
    for name in services() {
        let profiles = compose.service(name).list("profiles");
        assert_eq!(profiles, [PROFILE], "{name} must run under `{PROFILE}` alone (none: `up` would start it)");
    }
}

/// The scaled-out stack stands on its own: a dependency on a service of the default
/// stack would start that one too, and wait for (or write to) the wrong server.
#[test]
fn scale_services_depend_only_on_services_of_the_scale_profile() {
    let compose = compose();
    let mut problems = Vec::new();

    for name in services() {
        for dependency in compose.service(name).depends_on().into_keys() {
            if !services().contains(dependency.as_str()) {
                problems.push(format!("{name} depends on {dependency}, which is not in `{PROFILE}`"));
            }
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The scaled-out servers are the same PostgreSQL and NATS as the default stack's (the
/// replica's pg_basebackup must also be the primary's major version).
#[test]
fn scale_postgres_and_nats_run_the_images_of_the_default_stack() {
    let compose = compose();
    let postgres = compose.service("postgres").image();
    let nats = compose.service("nats").image();

    for name in [PRIMARY, REPLICA] {
        assert_eq!(compose.service(name).image(), postgres, "{name} runs another image than postgres");
    }
    for name in NATS_NODES {
        assert_eq!(compose.service(name).image(), nats, "{name} runs another image than nats");
    }
}

/// The primary writes WAL a standby can replay (`wal_level` replica or logical), has
/// WAL senders for the standby and for a base backup's WAL stream (`-X stream` takes a
/// second one while it copies), and runs with `hot_standby=on`.
#[test]
fn the_primary_writes_wal_for_streaming_standbys() {
    let settings = settings(PRIMARY);

    let wal_level = settings.get("wal_level").map(String::as_str);
    let senders = settings.get("max_wal_senders").map(|value| value.parse::<u32>().expect("a number"));

    assert!(matches!(wal_level, Some("replica" | "logical")), "{PRIMARY} runs with wal_level {wal_level:?}");
    assert!(senders.is_some_and(|senders| senders >= 2), "{PRIMARY} runs with max_wal_senders {senders:?}");
    assert_eq!(settings.get("hot_standby").map(String::as_str), Some("on"), "{PRIMARY}: {settings:?}");
}

/// PostgreSQL refuses to run a hot standby with fewer of these than its primary has
/// (the defaults count where a side does not set one).
#[test]
fn the_replica_allows_no_fewer_connections_senders_and_locks_than_the_primary() {
    const DEFAULTS: [(&str, u32); 5] = [
        ("max_connections", 100),
        ("max_worker_processes", 8),
        ("max_wal_senders", 10),
        ("max_prepared_transactions", 0),
        ("max_locks_per_transaction", 64),
    ];
    let primary = settings(PRIMARY);
    let replica = settings(REPLICA);
    let value = |settings: &BTreeMap<String, String>, name: &str, default: u32| {
        settings.get(name).map_or(default, |value| value.parse().unwrap_or_else(|_| panic!("{name}={value}")))
    };

    for (name, default) in DEFAULTS {
        let (on_primary, on_replica) = (value(&primary, name, default), value(&replica, name, default));
        assert!(on_replica >= on_primary, "{REPLICA} has {name}={on_replica}, below {PRIMARY}'s {on_primary}");
    }
    assert_ne!(replica.get("hot_standby").map(String::as_str), Some("off"), "the replica must answer reads");
}

/// The replica copies the primary as the role the primary's init script creates: its
/// pg_basebackup names the primary's service as host and that role as user, into the
/// data directory, writing the standby's settings (`-R`) and streaming the WAL it needs.
#[test]
fn the_replicas_base_backup_copies_the_primary_as_the_replication_role() {
    let compose = compose();
    let role = replication_role(&compose);

    let words = base_backup(&compose);

    let host = flag_value(&words, &["-h", "--host"]);
    let user = flag_value(&words, &["-U", "--username"]);
    assert_eq!(host.as_deref(), Some(PRIMARY), "pg_basebackup copies another host: {words:?}");
    assert_eq!(user, Some(role.clone()), "pg_basebackup connects as another user than {role}: {words:?}");
    assert_eq!(flag_value(&words, &["-D", "--pgdata"]).as_deref(), Some("$PGDATA"), "{words:?}");
    assert!(words.iter().any(|word| ["-R", "--write-recovery-conf"].contains(&word.as_str())), "{words:?}");
    let wal = flag_value(&words, &["-X", "--wal-method"]);
    assert!(matches!(wal.as_deref(), None | Some("stream" | "fetch")), "pg_basebackup -X {wal:?}");
}

/// The init script creates the replication role on the primary's first start, and
/// lets it connect for replication over the network by password (pg_hba.conf's `all`
/// does not cover replication; `trust` would let anyone copy the database).
#[test]
fn the_primary_lets_the_replication_role_replicate_by_password() {
    let compose = compose();
    let role = replication_role(&compose);

    let entries: Vec<Vec<String>> = primary_init_scripts(&compose)
        .iter()
        .flat_map(|(_, text)| shell_lines(text))
        .filter(|line| line.contains("pg_hba.conf"))
        .filter_map(|line| {
            let (_, quoted) = line.split_once(['"', '\''])?;
            let (entry, _) = quoted.split_once(['"', '\''])?;
            Some(entry.split_whitespace().map(str::to_owned).collect())
        })
        .collect();

    let allowed = entries.iter().any(|entry| {
        matches!(entry.as_slice(), [kind, database, user, _address, method]
            if ["host", "hostssl"].contains(&kind.as_str())
                && database == "replication"
                && *user == role
                && ["scram-sha-256", "md5"].contains(&method.as_str()))
    });
    assert!(allowed, "no `host replication {role} <address> scram-sha-256` added to pg_hba.conf: {entries:?}");
}

/// The replica authenticates with the password the primary gives the replication role:
/// the variable the init script sets it from holds, in compose.yaml, what the replica
/// gets as PGPASSWORD.
#[test]
fn the_replica_authenticates_with_the_password_the_primary_gives_the_replication_role() {
    let compose = compose();
    let primary = compose.service(PRIMARY);
    let scripts = primary_init_scripts(&compose);

    let passwords: BTreeSet<String> = scripts
        .iter()
        .flat_map(|(_, text)| shell_variables(text))
        .filter(|name| name.to_ascii_uppercase().contains("PASSWORD"))
        .collect();

    assert_eq!(passwords.len(), 1, "the init scripts read {passwords:?}, not one password variable");
    let from = passwords.first().expect("one variable");
    let given = variable(&primary, from);
    assert_eq!(variable(&compose.service(REPLICA), "PGPASSWORD"), given, "{REPLICA}'s PGPASSWORD is not {from}");
}

/// On the first start the replica copies the primary; on every start it then runs the
/// image's own entrypoint with compose's `postgres` command, as the postgres user (who
/// must own the copied files). The copy runs only while the volume holds no database,
/// or a restart would try to copy over the standby.
#[test]
fn the_replica_copies_only_into_an_empty_volume_then_hands_over_to_the_images_entrypoint() {
    let compose = compose();
    let replica = compose.service(REPLICA);
    let (path, text) = entrypoint_script(&replica);
    let lines = shell_lines(&text);

    let copy = lines.iter().position(|line| line.starts_with("pg_basebackup")).expect("the script copies");
    let guard = lines[..copy].iter().rposition(|line| line.starts_with("if "));
    let end = lines[copy..].iter().position(|line| line == "fi").map(|offset| copy + offset);

    assert_eq!(replica.value["user"].as_str(), Some("postgres"), "{REPLICA} must run as the postgres user");
    assert_eq!(replica.list("command").first().map(String::as_str), Some("postgres"), "{REPLICA}'s command");
    let guard = guard.map(|at| &lines[at]);
    assert!(
        guard.is_some_and(|line| line.contains("PG_VERSION") && line.contains('!')) && end.is_some(),
        "{}: pg_basebackup must run only inside `if [ ! -s \"$PGDATA/PG_VERSION\" ]; ... fi`, not after {guard:?}",
        path.display()
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("exec docker-entrypoint.sh \"$@\""),
        "{} must end by handing compose's command to the image's entrypoint",
        path.display()
    );
}

/// Both PostgreSQL servers are healthy when pg_isready reaches the lectern database
/// over TCP, as their clients do: while the primary's init scripts run, the image's
/// temporary server listens on its Unix socket only, and the replication role does not
/// exist yet.
#[test]
fn the_primary_and_the_replica_are_healthy_once_the_lectern_database_answers_over_tcp() {
    let compose = compose();
    let environment = compose.service(PRIMARY).environment();

    for name in [PRIMARY, REPLICA] {
        let check = compose.service(name).healthcheck().unwrap_or_else(|| panic!("{name} has no healthcheck"));
        let argument = |flags: &[&str]| flag_value(&check, flags);
        assert_eq!(check.first().map(String::as_str), Some("pg_isready"), "{name}: {check:?}");
        let host = argument(&["-h", "--host"]);
        assert!(matches!(host.as_deref(), Some("127.0.0.1" | "localhost")), "{name} checks over {host:?}: {check:?}");
        assert_eq!(argument(&["-U", "--username"]), environment.get("POSTGRES_USER").cloned(), "{name}: {check:?}");
        assert_eq!(argument(&["-d", "--dbname"]), environment.get("POSTGRES_DB").cloned(), "{name}: {check:?}");
    }
}

/// The three NATS servers form one cluster: the same `--cluster_name`, a name of their
/// own, a cluster listener, and `--routes` to the other two (not to themselves), on the
/// port each of those listens for routes.
#[test]
fn the_nats_nodes_route_to_each_other_and_share_one_cluster_name() {
    let compose = compose();
    let commands: BTreeMap<&str, Vec<String>> =
        NATS_NODES.iter().map(|name| (*name, compose.service(name).list("command"))).collect();
    let option = |name: &str, flag: &str| {
        flag_value(&commands[name], &[flag]).unwrap_or_else(|| panic!("{name} runs without {flag}"))
    };
    let route_port = |name: &str| {
        let listen = option(name, "--cluster");
        assert!(listen.starts_with("nats://0.0.0.0:"), "{name} takes routes on {listen}, not every interface");
        port_of(&listen)
    };

    let cluster_names: BTreeSet<String> = NATS_NODES.iter().map(|name| option(name, "--cluster_name")).collect();
    let server_names: BTreeSet<String> = NATS_NODES.iter().map(|name| option(name, "--server_name")).collect();

    assert_eq!(cluster_names.len(), 1, "the nodes name different clusters: {cluster_names:?}");
    assert_eq!(server_names.len(), NATS_NODES.len(), "two nodes share a server name: {server_names:?}");
    for name in NATS_NODES {
        let routes = servers(&option(name, "--routes"));
        let hosts: BTreeSet<&str> = routes.iter().map(|(host, _)| host.as_str()).collect();
        let others: BTreeSet<&str> = NATS_NODES.into_iter().filter(|other| *other != name).collect();
        assert_eq!(hosts, others, "{name} routes to {routes:?}, not to the other nodes");
        for (host, port) in &routes {
            assert_eq!(*port, route_port(host), "{name} routes to {host}:{port}, which takes routes elsewhere");
        }
    }
}

/// Every node runs JetStream and keeps its store on a named volume of its own (a shared
/// store would have three servers write the same files).
#[test]
fn every_nats_node_runs_jetstream_on_a_volume_of_its_own() {
    let compose = compose();
    let mut volumes = BTreeSet::new();

    for name in NATS_NODES.into_iter().chain(["nats"]) {
        let service = compose.service(name);
        let command = service.list("command");
        assert!(command.iter().any(|word| word == "-js"), "{name} runs without JetStream: {command:?}");
        let store = flag_value(&command, &["-sd", "--store_dir"]).unwrap_or_else(|| panic!("{name} has no -sd"));
        let (volume, _) = service
            .named_volumes()
            .into_iter()
            .find(|(_, target)| *target == store)
            .unwrap_or_else(|| panic!("{name}'s store {store} is not a named volume"));
        assert!(volumes.insert(volume.clone()), "{name} shares its store volume {volume}");
    }
}

/// The nodes are checked for health as the default nats is (the same check, asking the
/// same monitoring port), so `service_healthy` means JetStream is up on each.
#[test]
fn the_nats_nodes_are_health_checked_like_the_default_nats() {
    let compose = compose();
    let nats = compose.service("nats");
    let monitor = |service: &Service<'_>| flag_value(&service.list("command"), &["-m", "--http_port"]);

    for name in NATS_NODES {
        let node = compose.service(name);
        assert_eq!(node.healthcheck(), nats.healthcheck(), "{name}'s healthcheck");
        assert_eq!(monitor(&node), monitor(&nats), "{name}'s monitoring port");
    }
}

/// The projector knows every node of the cluster (so it reconnects to another when one
/// dies) on its client port, and creates `CHANGES` with a copy on each of them.
#[test]
fn the_scale_projector_knows_every_nats_node_and_keeps_a_copy_on_each() {
    let compose = compose();
    let projector = compose.service(PROJECTOR);

    let nats = servers(&variable(&projector, "NATS_URL"));
    let replicas = variable(&projector, "LECTERN_STREAM_REPLICAS");

    let hosts: BTreeSet<&str> = nats.iter().map(|(host, _)| host.as_str()).collect();
    assert_eq!(hosts, BTreeSet::from(NATS_NODES), "{PROJECTOR}'s NATS_URL names {nats:?}");
    for (host, port) in &nats {
        let client = flag_value(&compose.service(host).list("command"), &["-p", "--port"]);
        assert_eq!(port.to_string(), client.unwrap_or_else(|| "4222".to_owned()), "{host}'s client port");
    }
    assert_eq!(replicas, NATS_NODES.len().to_string(), "{PROJECTOR}'s LECTERN_STREAM_REPLICAS");
}

/// Everything that writes goes to the primary (a standby refuses writes and LISTEN):
/// the migrations, the projector, and the APIs' DATABASE_URL, each as the database's
/// own user to its database.
#[test]
fn every_scale_lectern_service_writes_to_the_primary() {
    let compose = compose();
    let environment = compose.service(PRIMARY).environment();

    for name in lectern_services() {
        let url = postgres_url(&variable(&compose.service(name), "DATABASE_URL"));
        assert_eq!((url.host.as_str(), url.port), (PRIMARY, 5432), "{name}'s DATABASE_URL: {url:?}");
        assert_eq!(Some(&url.user), environment.get("POSTGRES_USER"), "{name}'s DATABASE_URL user");
        assert_eq!(Some(&url.password), environment.get("POSTGRES_PASSWORD"), "{name}'s DATABASE_URL password");
        assert_eq!(Some(&url.database), environment.get("POSTGRES_DB"), "{name}'s DATABASE_URL database");
    }
}

/// Both APIs read from the replica: every URL of LECTERN_READ_DATABASE_URL is the
/// replica's, with the same user, password and database as their DATABASE_URL (the
/// replica is a copy of the primary, roles included).
#[test]
fn both_scale_apis_read_from_the_replica() {
    let compose = compose();

    for name in APIS {
        let api = compose.service(name);
        let primary = postgres_url(&variable(&api, "DATABASE_URL"));
        let reads: Vec<PostgresUrl> =
            variable(&api, "LECTERN_READ_DATABASE_URL").split(',').map(|url| postgres_url(url.trim())).collect();
        assert!(!reads.is_empty(), "{name} names no read database");
        for read in reads {
            assert_eq!((read.host.as_str(), read.port), (REPLICA, 5432), "{name} reads from {read:?}");
            let same = (&read.user, &read.password, &read.database);
            assert_eq!(same, (&primary.user, &primary.password, &primary.database), "{name}'s read URL");
        }
    }
}

/// The scaled-out APIs are the default api with other databases: the same secrets
/// (keys and cursors work on every API), production mode, listeners and command.
#[test]
fn the_scale_apis_run_as_the_default_api_does_but_for_their_databases() {
    let compose = compose();
    let api = compose.service("api");
    // Beside their databases, only the shutdown grace differs: the single `api` has no
    // balancer in front and stops at once; the scaled ones keep the default grace.
    let databases =
        ["DATABASE_URL", "LECTERN_READ_DATABASE_URL", "LECTERN_MAX_REPLICA_LAG_MS", "LECTERN_SHUTDOWN_GRACE_MS"];
    let settings = |service: &Service<'_>| {
        let mut environment = service.environment();
        environment.retain(|name, _| !databases.contains(&name.as_str()));
        environment
    };

    for name in APIS {
        let scaled = compose.service(name);
        assert_eq!(settings(&scaled), settings(&api), "{name}'s environment, beside its databases");
        assert_eq!(scaled.argv(), api.argv(), "{name}'s command");
        assert_eq!(scaled.healthcheck(), api.healthcheck(), "{name}'s healthcheck");
    }
}

/// Each service starts once what it needs is ready: the replica copies a primary that
/// is healthy (its init scripts done), the migrations run on a healthy primary, the
/// projector and the APIs wait for the migrations to succeed, the projector for every
/// NATS node to be healthy, and the APIs for a replica that answers reads.
#[test]
fn depends_on_starts_the_scaled_out_stack_in_order() {
    let compose = compose();
    let healthy = "service_healthy";
    let migrated = "service_completed_successfully";
    let mut expected: Vec<(&str, &str, &str)> =
        vec![(REPLICA, PRIMARY, healthy), (MIGRATE, PRIMARY, healthy), (PROJECTOR, MIGRATE, migrated)];
    expected.extend(NATS_NODES.map(|node| (PROJECTOR, node, healthy)));
    for api in APIS {
        expected.extend([(api, MIGRATE, migrated), (api, REPLICA, healthy)]);
    }
    let mut problems = Vec::new();

    for (name, dependency, condition) in expected {
        let depends_on = compose.service(name).depends_on();
        let found = depends_on.get(dependency).map(String::as_str);
        if found != Some(condition) {
            problems.push(format!("{name} must wait for {dependency}: {condition}, not {found:?}"));
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The migrations run once; restarting them would loop.
#[test]
fn the_scale_migrations_run_once() {
    let compose = compose();
    let migrate = compose.service(MIGRATE);

    assert_eq!(migrate.argv(), compose.service("migrate").argv(), "{MIGRATE}'s command");
    assert_eq!(migrate.value["restart"].as_str(), Some("no"), "{MIGRATE} restarts");
}

/// `docker compose --profile scale up` runs both stacks: each API is published on this
/// host's loopback, on a host port of its own (no other service's, the default api's
/// 8080 included), to the port it listens on.
#[test]
fn the_scale_apis_are_published_on_loopback_on_host_ports_of_their_own() {
    let compose = compose();
    let mut published: BTreeMap<String, String> = BTreeMap::new();
    for service in compose.services().values() {
        // A port without a host port gets a free one from Docker: it cannot clash.
        for host_port in service.ports().into_iter().filter_map(|port| port.published) {
            if let Some(other) = published.insert(host_port.clone(), service.name.to_owned()) {
                panic!("{} and {other} both publish host port {host_port}", service.name);
            }
        }
    }

    for name in APIS {
        let api = compose.service(name);
        let listen = variable(&api, "LECTERN_LISTEN");
        let ports = api.ports();
        assert_eq!(ports.len(), 1, "{name} publishes exactly its HTTP port: {ports:?}");
        assert_eq!(ports[0].target, port_of(&listen), "{name} publishes another port than LECTERN_LISTEN's");
        assert!(ports[0].is_loopback_only(), "{name} is published beyond this host's loopback: {ports:?}");
    }
}

/// Every file the profile mounts from the repository exists (else Docker creates an
/// empty directory in its place), and every script run directly (an entrypoint, or an
/// init script the postgres image runs rather than sources) may be read and run by any
/// user: the container's user is not the checkout's owner.
#[test]
fn scripts_mounted_into_scale_services_exist_and_those_run_directly_are_executable() {
    let compose = compose();
    let mut problems = Vec::new();
    let mut executed = 0;

    for name in services() {
        let service = compose.service(name);
        let entrypoint = service.list("entrypoint");
        for (source, target) in service.bind_mounts() {
            let path = host_path(&source);
            let Ok(metadata) = std::fs::metadata(&path) else {
                problems.push(format!("{name} mounts {source}, which does not exist"));
                continue;
            };
            let run = entrypoint.first() == Some(&target)
                || (target.starts_with(&format!("{INITDB_DIR}/")) && target.ends_with(".sh"));
            if run {
                executed += 1;
                if metadata.permissions().mode() & 0o005 != 0o005 {
                    problems.push(format!(
                        "{name} runs {source} ({:o}), which other users may not read and execute",
                        metadata.permissions().mode()
                    ));
                }
            }
        }
        if let Some(program) = entrypoint.first().filter(|program| program.starts_with('/')) {
            if !service.bind_mounts().iter().any(|(_, target)| target == program) {
                problems.push(format!("{name}'s entrypoint {program} is not mounted from the repository"));
            }
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(executed >= 2, "the profile runs {executed} mounted scripts: the checks above have nothing to check");
}

#[test]
fn postgres_urls_and_server_lists_are_taken_apart() {
    let url = postgres_url("postgres://lectern:${P:?x}@postgres-primary:5432/lectern");
    assert_eq!(
        (url.user.as_str(), url.password.as_str(), url.host.as_str(), url.port, url.database.as_str()),
        ("lectern", "${P:?x}", "postgres-primary", 5432, "lectern")
    );
    assert_eq!(servers("nats://a:1, nats://b:2"), [("a".to_owned(), 1), ("b".to_owned(), 2)]);
    let words: Vec<String> = ["-h", "x", "--username=u"].map(str::to_owned).into();
    assert_eq!(flag_value(&words, &["-h"]).as_deref(), Some("x"));
    assert_eq!(flag_value(&words, &["-U", "--username"]).as_deref(), Some("u"));
    assert_eq!(shell_lines("# c\na \\\n  b\n\nc"), ["a b", "c"]);
    assert_eq!(shell_variables("\"$A\" ${B:?m} $$ $1 $@"), ["A", "B"].map(str::to_owned).into());
}
