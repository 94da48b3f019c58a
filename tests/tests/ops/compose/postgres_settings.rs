//! The settings compose.yaml gives PostgreSQL on its command line (`-c name=value`),
//! checked by PostgreSQL itself: a misspelt name or a value out of range would keep
//! the database, and so the whole stack, from starting. The `scale` profile's primary
//! and replica are checked the same way.

use lectern_tests::postgres::TestPostgres;
use sqlx::{Connection, PgConnection};

use super::scale;
use crate::stack::compose;

/// The PostgreSQL servers compose.yaml runs, the `scale` profile's included.
const SERVERS: [&str; 3] = ["postgres", scale::PRIMARY, scale::REPLICA];

/// The `-c name=value` pairs of `service`'s command, in order.
pub(super) fn command_line_settings(service: &str) -> Vec<(String, String)> {
    let command = compose().service(service).list("command");
    let mut settings = Vec::new();
    let mut words = command.iter();
    while let Some(word) = words.next() {
        if word == "-c" {
            let setting = words.next().unwrap_or_else(|| panic!("-c without a setting at the end of {command:?}"));
            let (name, value) = setting.split_once('=').unwrap_or_else(|| panic!("-c {setting}: not name=value"));
            settings.push((name.to_owned(), value.to_owned()));
        }
    }
    settings
}

#[tokio::test]
async fn every_setting_on_the_postgres_command_line_is_one_postgresql_accepts() {
    let settings: Vec<(String, String)> = SERVERS.iter().flat_map(|service| command_line_settings(service)).collect();
    let mut server = TestPostgres::start_new().await;
    let mut connection = PgConnection::connect(&server.url_for("postgres")).await.expect("connect");

    for (name, value) in &settings {
        // Names cannot be bound; this one only ever comes from compose.yaml.
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "unexpected setting name {name:?}");
        let set = format!("alter system set {name} = '{}'", value.replace('\'', "''"));
        let accepted = sqlx::query(&set).execute(&mut connection).await;
        assert!(accepted.is_ok(), "PostgreSQL rejects -c {name}={value}: {accepted:?}");
    }
    let _ = connection.close().await;
    server.stop().await;
}

/// The stock 1 GB forces a checkpoint every 8-10 s under 2,000 updates a second, and
/// every page an update touches after one is written to the WAL whole again: 4.6 times
/// the WAL, and a publish→visible p99 several times longer (bench/history.md, 2026-11-25, 14:00-17:00).
/// The `scale` profile's primary takes the same writes.
#[test]
fn compose_postgres_spaces_its_checkpoints_for_the_projectors_writes() {
    for service in ["postgres", scale::PRIMARY] {
        let settings = command_line_settings(service);

        let max_wal_size = settings.iter().find(|(name, _)| name == "max_wal_size").map(|(_, value)| value.as_str());

        let megabytes = max_wal_size.and_then(megabytes);
        assert!(
            megabytes.is_some_and(|megabytes| megabytes >= 8 * 1024),
            "compose's {service} runs with max_wal_size {max_wal_size:?}, not 8GB or more"
        );
    }
}

/// A size in PostgreSQL's units for `max_wal_size` (MB, GB or TB), in megabytes.
fn megabytes(value: &str) -> Option<u64> {
    [("MB", 1), ("GB", 1024), ("TB", 1024 * 1024)].iter().find_map(|(unit, scale)| {
        value.strip_suffix(unit).and_then(|number| number.trim().parse::<u64>().ok()).map(|number| number * scale)
    })
}
