//! compose.yaml, checked on paper: the services and their images, volumes, ordering,
//! ports and secrets, and every command line and environment variable against what the
//! real binaries accept. `health` runs the services' health checks for real; `scale`
//! checks the profile that runs the stack scaled out.

mod health;
mod postgres_settings;
mod scale;

use std::collections::{BTreeMap, BTreeSet};

use crate::cli::{self, problems_with_command, READ_OUTSIDE_CLAP};
use crate::stack::{self, compose, env_example, is_secret_name, port_of, references, LECTERN_BINARIES};

const SERVICES: [&str; 6] = ["postgres", "nats", "migrate", "projector", "api", "demo"];

#[test]
fn the_stack_is_postgres_nats_migrate_projector_api_and_a_demo_seeder() {
    let compose = compose();

    // Beside the `scale` profile's services (scale.rs).
    let names: BTreeSet<String> =
        compose.services().into_keys().filter(|name| !scale::services().contains(name.as_str())).collect();

    assert_eq!(names, SERVICES.map(str::to_owned).into());
}

#[test]
fn postgres_and_nats_run_their_official_images() {
    let compose = compose();

    let postgres = compose.service("postgres").image().unwrap_or_default().to_owned();
    let nats = compose.service("nats").image().unwrap_or_default().to_owned();

    // Official images have no namespace: `postgres:16`, not `someone/postgres:16`.
    assert!(
        ["postgres:15", "postgres:16"]
            .iter()
            .any(|image| postgres == *image || postgres.starts_with(&format!("{image}-"))),
        "postgres runs {postgres:?}, not the official postgres:15 or postgres:16"
    );
    assert!(nats.starts_with("nats:2.") && !nats.contains('/'), "nats runs {nats:?}, not the official nats:2.x");
}

#[test]
fn nats_runs_with_jetstream_storing_on_its_named_volume() {
    let compose = compose();
    let nats = compose.service("nats");

    let command = nats.list("command");
    let store = command.iter().position(|word| word == "-sd").and_then(|at| command.get(at + 1));

    assert!(command.iter().any(|word| word == "-js"), "nats runs without JetStream: {command:?}");
    let store = store.unwrap_or_else(|| panic!("nats stores JetStream nowhere (-sd): {command:?}"));
    assert!(
        nats.named_volumes().iter().any(|(_, target)| target == store),
        "JetStream's store {store} is not a named volume: {:?}",
        nats.named_volumes()
    );
}

#[test]
fn postgres_keeps_its_data_in_a_named_volume() {
    let compose = compose();

    let volumes = compose.service("postgres").named_volumes();

    assert!(
        volumes.iter().any(|(_, target)| target == "/var/lib/postgresql/data"),
        "postgres's data directory is not a named volume: {volumes:?}"
    );
}

#[test]
fn every_named_volume_is_declared_and_every_declared_volume_is_used() {
    let compose = compose();

    let declared: BTreeSet<String> = compose.declared_volumes().into_iter().collect();
    let used: BTreeSet<String> =
        compose.services().values().flat_map(|service| service.named_volumes()).map(|(name, _)| name).collect();

    assert_eq!(used, declared, "named volumes used by services vs declared under `volumes:`");
}

#[test]
fn postgres_is_healthy_when_pg_isready_reaches_the_lectern_database() {
    let compose = compose();
    let postgres = compose.service("postgres");
    let environment = postgres.environment();

    let check = postgres.healthcheck().expect("postgres has a healthcheck");

    assert_eq!(check.first().map(String::as_str), Some("pg_isready"), "{check:?}");
    let argument = |flag: &str| check.iter().position(|word| word == flag).and_then(|at| check.get(at + 1)).cloned();
    assert_eq!(argument("-U"), environment.get("POSTGRES_USER").cloned(), "pg_isready -U is not POSTGRES_USER");
    assert_eq!(argument("-d"), environment.get("POSTGRES_DB").cloned(), "pg_isready -d is not POSTGRES_DB");
}

#[test]
fn the_nats_healthcheck_can_run_in_its_image_and_asks_the_monitoring_port() {
    let compose = compose();
    let nats = compose.service("nats");
    let image = nats.image().unwrap_or_default();

    let check = nats.healthcheck().expect("nats has a healthcheck (else the projector relies on its own retries)");

    // The default nats tag is FROM scratch: only the alpine variant has a wget to run.
    assert!(image.contains("alpine"), "{image} has no shell or wget to run {check:?}");
    assert_eq!(check.first().map(String::as_str), Some("wget"), "{check:?}");
    let command = nats.list("command");
    let monitor = command.iter().position(|word| word == "-m").and_then(|at| command.get(at + 1));
    let monitor = monitor.unwrap_or_else(|| panic!("nats has no monitoring port (-m): {command:?}"));
    let url = check.iter().find(|word| word.starts_with("http://")).expect("the check names a URL");
    let (_, port, path) = stack::http_url(url);
    assert_eq!(port.to_string(), *monitor, "the check asks port {port}, the monitoring port is {monitor}");
    assert_eq!(path, "/healthz", "nats answers its health on /healthz");
}

#[test]
fn lectern_services_share_one_image_built_from_the_dockerfile() {
    let compose = compose();

    let lectern: BTreeSet<String> = compose.lectern_services().iter().map(|service| service.name.to_owned()).collect();

    let mut expected: BTreeSet<String> = ["migrate", "projector", "api", "demo"].map(str::to_owned).into();
    expected.extend(scale::lectern_services().into_iter().map(str::to_owned));
    assert_eq!(lectern, expected);
    for service in compose.lectern_services() {
        let build = &service.value["build"];
        let context = build.as_str().or_else(|| build["context"].as_str());
        assert_eq!(context, Some("."), "{} does not build from the workspace root", service.name);
        let dockerfile = build["dockerfile"].as_str().unwrap_or("Dockerfile");
        assert_eq!(dockerfile, "Dockerfile", "{} builds from another Dockerfile", service.name);
    }
}

#[test]
fn every_lectern_command_is_a_real_subcommand_given_only_flags_it_accepts() {
    let compose = compose();
    let mut problems = Vec::new();

    for service in compose.lectern_services() {
        problems.extend(problems_with_command(&format!("{}'s command", service.name), &service.argv()));
        if let Some(check) = service.healthcheck() {
            problems.extend(problems_with_command(&format!("{}'s healthcheck", service.name), &check));
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_environment_variable_of_a_lectern_service_is_one_its_command_reads() {
    let compose = compose();
    let mut problems = Vec::new();

    for service in compose.lectern_services() {
        let argv = service.argv();
        let words: Vec<&str> = argv.iter().skip(1).take(1).map(String::as_str).collect();
        let Some(help) = argv.first().and_then(|binary| cli::help(binary, &words)) else {
            problems.push(format!("{}: {argv:?} is not a command the image can run", service.name));
            continue;
        };
        for name in service.environment().into_keys() {
            if !help.env.contains(&name) && !READ_OUTSIDE_CLAP.contains(&name.as_str()) {
                problems.push(format!(
                    "{}: `{}` does not read {name} (it reads {:?} and {READ_OUTSIDE_CLAP:?})",
                    service.name,
                    argv[..2.min(argv.len())].join(" "),
                    help.env
                ));
            }
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn lectern_services_log_json_and_every_api_runs_in_production_mode() {
    let compose = compose();
    let serves = ["lectern-api".to_owned(), "serve".to_owned()];

    for service in compose.lectern_services() {
        let environment = service.environment();
        assert_eq!(environment.get("LECTERN_LOG_FORMAT").map(String::as_str), Some("json"), "{}", service.name);
        if service.argv().starts_with(&serves) {
            assert_eq!(
                environment.get("LECTERN_PRODUCTION").map(String::as_str),
                Some("1"),
                "{} must run with LECTERN_PRODUCTION=1",
                service.name
            );
        }
    }
    let api = compose.service("api").argv();
    assert!(api.starts_with(&serves), "the api runs {api:?}");
}

#[test]
fn no_secret_is_written_in_compose_yaml_each_is_a_required_reference() {
    let compose = compose();
    let mut problems = Vec::new();

    for service in compose.services().values() {
        for (name, value) in service.environment() {
            let found = references(&value);
            let whole = found.len() == 1 && found[0].span == (0..value.len()) && found[0].is_required();
            if is_secret_name(&name) && !whole {
                problems
                    .push(format!("{}.{name} must be one ${{VAR:?message}} reference, not {value:?}", service.name));
            }
            // A password inside a URL (postgres://user:password@host) is a secret too.
            if let Some(password) = url_password(&value) {
                let found = references(password);
                if !(found.len() == 1 && found[0].span == (0..password.len()) && found[0].is_required()) {
                    problems.push(format!("{}.{name} has a literal password in its URL", service.name));
                }
            }
        }
    }
    // A default for a secret would be a literal in disguise.
    for text in compose.strings() {
        for reference in references(&text).iter().filter(|r| is_secret_name(&r.name) && !r.is_required()) {
            problems.push(format!("{} is referenced as {text:?}, not as a required ${{VAR:?message}}", reference.name));
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The password of a `scheme://user:password@host...` URL.
fn url_password(value: &str) -> Option<&str> {
    let (_, rest) = value.split_once("://")?;
    let userinfo = &rest[..rest.rfind('@')?];
    userinfo.split_once(':').map(|(_, password)| password)
}

#[test]
fn every_variable_compose_yaml_references_is_defined_in_env_example() {
    let compose = compose();
    let defined = env_example();

    let missing: BTreeSet<String> = compose
        .strings()
        .iter()
        .flat_map(|text| references(text))
        .map(|reference| reference.name)
        .filter(|name| !defined.contains_key(name))
        .collect();

    assert!(missing.is_empty(), "compose.yaml uses {missing:?}, which .env.example does not define");
}

#[test]
fn env_example_defines_only_variables_compose_yaml_uses() {
    let compose = compose();
    let used: BTreeSet<String> =
        compose.strings().iter().flat_map(|text| references(text)).map(|reference| reference.name).collect();

    let unused: Vec<String> = env_example().into_keys().filter(|name| !used.contains(name)).collect();

    assert!(unused.is_empty(), ".env.example defines {unused:?}, which compose.yaml never uses");
}

#[test]
fn env_example_secrets_are_placeholders_too_short_for_production() {
    let placeholders: BTreeMap<String, String> =
        env_example().into_iter().filter(|(name, _)| is_secret_name(name)).collect();

    // 32 bytes is the API's production minimum (api/src/config.rs): an unedited copy
    // of .env.example cannot serve with guessable secrets.
    assert!(!placeholders.is_empty(), ".env.example defines no secret");
    for (name, value) in placeholders {
        assert!(value.len() < 32, "{name}'s placeholder {value:?} would pass for a real secret");
    }
}

#[test]
fn the_api_publishes_its_listen_port_on_loopback_only() {
    let compose = compose();
    let api = compose.service("api");
    let listen = api.environment().get("LECTERN_LISTEN").cloned().expect("the api sets LECTERN_LISTEN");

    let ports = api.ports();

    assert!(listen.starts_with("0.0.0.0:"), "the api must listen on every interface of its container, not {listen}");
    assert_eq!(ports.len(), 1, "the api publishes exactly its HTTP port: {ports:?}");
    assert_eq!(ports[0].target, port_of(&listen), "the published container port is not LECTERN_LISTEN's");
    assert_eq!(ports[0].host_ip.as_deref(), Some("127.0.0.1"), "the api is published beyond this host's loopback");
    assert_eq!(ports[0].published.as_deref(), Some("8080"), "the api is published on another host port");
}

#[test]
fn no_port_is_published_beyond_loopback_and_metrics_ports_are_not_published() {
    let compose = compose();
    let mut problems = Vec::new();

    for service in compose.services().values() {
        let metrics: Vec<u16> = service
            .environment()
            .iter()
            .filter(|(name, _)| name.contains("METRICS_LISTEN"))
            .map(|(_, address)| port_of(address))
            .collect();
        for port in service.ports() {
            if !port.is_loopback_only() {
                problems.push(format!("{} publishes {port:?} on every interface", service.name));
            }
            if metrics.contains(&port.target) {
                problems.push(format!("{} publishes its metrics port {}", service.name, port.target));
            }
        }
    }

    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn migrate_waits_for_a_healthy_postgres() {
    let compose = compose();

    let depends_on = compose.service("migrate").depends_on();

    assert_eq!(depends_on.get("postgres").map(String::as_str), Some("service_healthy"), "{depends_on:?}");
}

#[test]
fn the_api_and_the_projector_wait_for_migrations_to_complete_successfully() {
    let compose = compose();

    for name in ["api", "projector"] {
        let depends_on = compose.service(name).depends_on();
        assert_eq!(
            depends_on.get("migrate").map(String::as_str),
            Some("service_completed_successfully"),
            "{name}: {depends_on:?}"
        );
    }
}

#[test]
fn the_projector_and_the_demo_seeder_wait_for_a_healthy_nats() {
    let compose = compose();

    for name in ["projector", "demo"] {
        let depends_on = compose.service(name).depends_on();
        assert_eq!(depends_on.get("nats").map(String::as_str), Some("service_healthy"), "{name}: {depends_on:?}");
    }
}

#[test]
fn the_demo_seeder_runs_only_under_the_demo_profile() {
    let compose = compose();

    for service in compose.services().values() {
        let profiles = service.list("profiles");
        if service.name == "demo" {
            assert_eq!(profiles, ["demo"], "`docker compose --profile demo up` must be what runs the seeder");
            assert_eq!(service.argv().get(..2), Some(&["lectern-dev".to_owned(), "publish-demo".to_owned()][..]));
        } else if !scale::services().contains(service.name) {
            // The `scale` profile's services are checked in scale.rs.
            assert!(profiles.is_empty(), "{} must run without a profile: {profiles:?}", service.name);
        }
    }
}

#[test]
fn one_shot_services_never_restart_and_long_running_ones_do() {
    let compose = compose();

    for service in compose.services().values() {
        let restart = service.value["restart"].as_str().unwrap_or("no");
        if ["migrate", "demo", scale::MIGRATE].contains(&service.name) {
            assert_eq!(restart, "no", "{} runs once: restarting it would loop", service.name);
        } else {
            assert!(
                ["unless-stopped", "always", "on-failure"].contains(&restart),
                "{} restart: {restart}",
                service.name
            );
        }
    }
}

#[test]
fn every_lectern_service_runs_one_of_the_image_binaries() {
    let compose = compose();

    for service in compose.lectern_services() {
        let argv = service.argv();
        assert!(
            argv.first().is_some_and(|binary| LECTERN_BINARIES.contains(&binary.as_str())),
            "{} runs {argv:?}",
            service.name
        );
    }
}
