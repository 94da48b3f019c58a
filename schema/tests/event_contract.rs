//! The Rust decoder accepts exactly what the committed JSON Schemas accept: every
//! example passes both, every case of the bad corpus fails both.

#![expect(clippy::unwrap_used, reason = "in tests, a failed expectation is the test failing")]

use std::path::{Path, PathBuf};

use jsonschema::{Registry, Validator};
use lectern_schema::events::{ChangeEvent, RecordState};
use serde_json::Value;

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The envelope schema with its two data schemas registered under their `$id`s, with
/// format assertions on (email, uuid, date-time), and no network.
fn validator() -> Validator {
    let mut registry = Registry::new();
    for name in ["change-event", "contact-data", "item-data"] {
        let schema = read_json(&events_dir().join(format!("{name}.schema.json")));
        let id = schema["$id"].as_str().unwrap().to_owned();
        registry = registry.add(id, schema).unwrap();
    }
    let registry = registry.prepare().unwrap();
    let root = read_json(&events_dir().join("change-event.schema.json"));
    jsonschema::options().with_registry(&registry).should_validate_formats(true).build(&root).unwrap()
}

fn examples() -> Vec<(String, Value)> {
    let mut found: Vec<(String, Value)> = std::fs::read_dir(events_dir().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), read_json(&path)))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[test]
fn every_example_is_accepted_by_the_schema_and_by_the_decoder() {
    let validator = validator();
    let examples = examples();
    assert!(examples.len() >= 6, "examples missing");
    for (name, example) in examples {
        let problems: Vec<String> = validator.iter_errors(&example).map(|e| e.to_string()).collect();
        assert!(problems.is_empty(), "{name}: schema refuses its own example: {problems:?}");
        let decoded = ChangeEvent::decode(example.to_string().as_bytes());
        assert!(decoded.is_ok(), "{name}: decoder refuses it: {decoded:?}");
    }
}

#[test]
fn every_bad_event_is_refused_by_the_schema_and_by_the_decoder() {
    let validator = validator();
    let cases = read_json(&events_dir().join("invalid/cases.json"));
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 40, "the bad corpus shrank");
    for case in cases {
        let why = case["why"].as_str().unwrap();
        let event = &case["event"];
        assert!(!validator.is_valid(event), "schema accepts a bad event: {why}");
        let decoded = ChangeEvent::decode(event.to_string().as_bytes());
        assert!(decoded.is_err(), "decoder accepts a bad event: {why}: {decoded:?}");
    }
}

#[test]
fn bytes_that_are_not_a_json_event_are_refused_with_their_reason() {
    let cases: [(&[u8], &str); 4] =
        [(b"\xff\xfe not utf-8", "UTF-8"), (b"{\"eventId\": ", "JSON"), (b"", "JSON"), (b"null", "schema")];
    for (bytes, reason) in cases {
        let error = ChangeEvent::decode(bytes).unwrap_err().to_string();
        assert!(error.contains(reason), "{bytes:?}: {error}");
    }
}

#[test]
fn unknown_extra_fields_are_ignored() {
    let (_, mut event) = examples().into_iter().find(|(name, _)| name == "contact.created.json").unwrap();
    event["traceId"] = Value::from("abc");
    event["data"]["favouriteColour"] = Value::from("green");

    let decoded = ChangeEvent::decode(event.to_string().as_bytes()).unwrap();

    assert!(matches!(decoded.state, Some(RecordState::Contact(_))));
    assert!(validator().is_valid(&event));
}

#[test]
fn money_keeps_its_exact_decimal_text() {
    let (_, event) = examples().into_iter().find(|(name, _)| name == "item.restored.json").unwrap();

    let decoded = ChangeEvent::decode(event.to_string().as_bytes()).unwrap();

    let Some(RecordState::Item(item)) = decoded.state else { panic!("item state expected") };
    assert_eq!(item.sale_price.unwrap().amount.as_str(), "-12345678901234.5678");
    assert_eq!(item.purchase_price.unwrap().amount.as_str(), "0.10");
}

#[test]
fn an_event_must_arrive_on_its_own_subject() {
    let (_, event) = examples().into_iter().find(|(name, _)| name == "contact.created.json").unwrap();
    let bytes = event.to_string();
    let own = "changes.6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11.contacts.b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00";
    let other_workspace = "changes.00000000-0000-4000-8000-000000000000.contacts.b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00";
    let other_kind = "changes.6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11.items.b3c6a1d2-2f0e-4c1b-9a9e-7e3d5c2b1a00";

    assert!(ChangeEvent::decode_from(own, bytes.as_bytes()).is_ok());
    for subject in [other_workspace, other_kind, "changes.x"] {
        let error = ChangeEvent::decode_from(subject, bytes.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("does not match"), "{subject}: {error}");
    }
}
