//! `ChangeEvent::decode` under hostile bytes: arbitrary bytes, arbitrary JSON, and the
//! schema's examples mutated field by field. Decoding never panics; it accepts or
//! names a contract violation. Whatever it accepts is a well-formed event that
//! re-serialises (exactly, and in the contract's own millisecond rendering) into
//! something it accepts again, and that arrives only on its own subject.

use std::path::PathBuf;

use chrono::SecondsFormat;
use lectern_api::keys::Scope;
use lectern_schema::events::{ChangeEvent, RecordState};
use lectern_schema::Timestamp;
use lectern_tests::ContactSeed;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::regressions;
use crate::world::{cases, config, corpus_files, replay, World};

/// The valid examples of `schema/events/examples/`, parsed.
fn examples() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/events/examples");
    let mut examples: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.expect("example entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read example");
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            (name, serde_json::from_str(&text).expect("example is JSON"))
        })
        .collect();
    examples.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(examples.len() >= 4, "expected the schema's examples in {}", dir.display());
    examples
}

/// `event` as JSON again, every instant with its full precision.
fn encode(event: &ChangeEvent) -> Value {
    encode_with(event, |timestamp| timestamp.as_datetime().to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// `event` as JSON with instants rendered by `instant`.
fn encode_with(event: &ChangeEvent, instant: impl Fn(&Timestamp) -> String) -> Value {
    let mut value = json!({
        "eventId": event.event_id,
        "type": event.event_type.to_string(),
        "workspaceId": event.workspace_id,
        "entityId": event.entity_id,
        "version": event.version,
        "occurredAt": instant(&event.occurred_at),
    });
    match &event.state {
        None => {}
        Some(RecordState::Contact(data)) => {
            value["data"] = json!({
                "name": data.name, "email": data.email, "phone": data.phone, "address": data.address,
                "tin": data.tin, "isCustomer": data.is_customer, "isSupplier": data.is_supplier,
                "createdAt": instant(&data.created_at),
            });
        }
        Some(RecordState::Item(data)) => {
            value["data"] = json!({
                "name": data.name, "sku": data.sku, "description": data.description, "type": data.kind,
                "unit": data.unit, "salePrice": data.sale_price, "purchasePrice": data.purchase_price,
                "createdAt": instant(&data.created_at),
            });
        }
    }
    value
}

/// The contract's rendering of an instant: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_contract_instant(text: &str) -> bool {
    let bytes = text.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd.dddZ";
    bytes.len() == shape.len()
        && bytes.iter().zip(shape).all(|(byte, want)| if *want == b'd' { byte.is_ascii_digit() } else { byte == want })
}

/// Decodes `bytes` (which must not panic) and, when accepted, checks everything an
/// accepted event promises.
fn check(bytes: &[u8], what: &str) {
    let Ok(event) = ChangeEvent::decode(bytes) else {
        // A refusal must name its reason.
        let error = ChangeEvent::decode(bytes).err().map(|error| error.to_string()).unwrap_or_default();
        assert!(!error.is_empty(), "{what}: a refusal without a reason");
        return;
    };
    assert!(event.version >= 1, "{what}: accepted version {}", event.version);
    assert_eq!(event.state.is_some(), event.event_type.change.carries_state(), "{what}: state and type disagree");
    match &event.state {
        Some(RecordState::Contact(data)) => {
            assert_eq!(event.event_type.entity.subject_segment(), "contacts", "{what}");
            assert!(!data.name.is_empty(), "{what}: empty name accepted");
            if let Some(email) = &data.email {
                assert!(lectern_schema::events::is_email(email), "{what}: bad email accepted: {email:?}");
            }
        }
        Some(RecordState::Item(data)) => {
            assert_eq!(event.event_type.entity.subject_segment(), "items", "{what}");
            assert!(!data.name.is_empty(), "{what}: empty name accepted");
        }
        None => {}
    }

    // Exactly re-serialised, it decodes to the same event.
    let again = encode(&event).to_string();
    let decoded = ChangeEvent::decode(again.as_bytes());
    let decoded = decoded.unwrap_or_else(|error| panic!("{what}: re-serialised event refused ({error}): {again}"));
    assert_eq!(decoded, event, "{what}: the round trip changed the event: {again}");

    // Rendered the way the API renders instants, it is still accepted, and every
    // instant has the contract's shape.
    let rendered = encode_with(&event, ToString::to_string);
    for instant in [&rendered["occurredAt"], &rendered["data"]["createdAt"]] {
        if let Some(text) = instant.as_str() {
            assert!(is_contract_instant(text), "{what}: an accepted instant renders as {text:?}");
        }
    }
    let rendered = rendered.to_string();
    if let Err(error) = ChangeEvent::decode(rendered.as_bytes()) {
        panic!("{what}: the contract rendering of an accepted event is refused ({error}): {rendered}");
    }

    // It arrives on its own subject only.
    let subject = event.expected_subject();
    assert!(ChangeEvent::decode_from(&subject, bytes).is_ok(), "{what}: refused on its own subject {subject}");
    for other in foreign_subjects(&event) {
        assert!(ChangeEvent::decode_from(&other, bytes).is_err(), "{what}: accepted on foreign subject {other:?}");
    }
}

/// Subjects an event must be refused on.
fn foreign_subjects(event: &ChangeEvent) -> Vec<String> {
    let segment = event.event_type.entity.subject_segment();
    let other_segment = if segment == "contacts" { "items" } else { "contacts" };
    let (workspace, entity) = (event.workspace_id, event.entity_id);
    let mut subjects = vec![
        format!("changes.{workspace}.{other_segment}.{entity}"),
        format!("changes.{workspace}.{segment}.{entity}.x"),
        format!("changes.{workspace}.{segment}"),
        format!("CHANGES.{workspace}.{segment}.{entity}"),
        format!("changes.{}.{segment}.{entity}", workspace.simple()),
        format!("changes.{{{workspace}}}.{segment}.{entity}"),
        format!("changes.{workspace}.{segment}.urn:uuid:{entity}"),
        format!("changes.{workspace}.{segment}.{entity} "),
        format!("changes..{workspace}.{segment}.{entity}"),
        String::new(),
    ];
    // With the same id for both (a mutation can make them equal), the swapped subject and
    // this one are the event's own.
    if workspace != entity {
        subjects.push(format!("changes.{entity}.{segment}.{workspace}"));
        subjects.push(format!("changes.{entity}.{segment}.{entity}"));
    }
    subjects
}

// Strategies.

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|number| serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
        nasty_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

const FIELDS: &[&str] = &[
    "eventId",
    "type",
    "workspaceId",
    "entityId",
    "version",
    "occurredAt",
    "data",
    "name",
    "email",
    "phone",
    "address",
    "tin",
    "isCustomer",
    "isSupplier",
    "createdAt",
    "sku",
    "description",
    "unit",
    "salePrice",
    "purchasePrice",
    "amount",
    "currency",
];

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => select(FIELDS).prop_map(str::to_owned), 1 => "[a-zA-Z]{0,10}"]
}

/// Text that is hard on parsers: instants, UUIDs, amounts, types and emails that are
/// almost right, huge, or odd.
fn nasty_string() -> impl Strategy<Value = String> {
    prop_oneof![
        select(&[
            // instants
            "2026-11-21T10:15:30.120Z",
            "2026-11-21t10:15:30.120z",
            "2026-11-21T10:15:30Z",
            "2026-11-21T10:15:30.1234567891234Z",
            "2026-11-21T10:15:30+23:59",
            "2026-11-21T10:15:30-23:59",
            "2026-11-21T10:15:30+24:00",
            "2026-11-21T10:15:30.120",
            "2026-02-30T10:15:30Z",
            "2016-12-31T23:59:60Z",
            "2016-12-31T23:59:60.999Z",
            "0000-01-01T00:00:00Z",
            "0000-01-01T00:00:00+00:01",
            "0001-01-01T00:00:00+23:59",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59-00:01",
            "9999-12-31T23:59:59.999999999-23:59",
            "+10000-01-01T00:00:00Z",
            "2026-11-21T10:15:30.Z",
            "2026-11-21 10:15:30Z",
            // uuids
            "6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11",
            "6D1F0B7E-3C55-4A3B-8F9F-5D1F0E2A7C11",
            "6d1f0b7e3c554a3b8f9f5d1f0e2a7c11",
            "{6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11}",
            "urn:uuid:6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11",
            "00000000-0000-0000-0000-000000000000",
            "6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c1g",
            // types
            "contact.created",
            "contact.archived",
            "item.restored",
            "item.deleted",
            "contact.",
            ".created",
            "contact.created ",
            "Contact.Created",
            "contact.created\u{0}",
            // amounts and currencies
            "12.50",
            "-0.0",
            "-",
            "1e3",
            "99999999999999999999999999999999999999999",
            "0.10",
            "EUR",
            "eur",
            "€",
            // emails
            "billing@acme.example",
            "a@b.c",
            "@b.c",
            "a@.c",
            "a@b.",
            "a@@b.c",
            "a b@c.d",
            "a@b.c\u{a0}",
            // other
            "",
            "\u{0}",
            "\u{feff}",
            "\u{202e}gnp.exe",
            "product",
            "service",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,40}",
        (1usize..200_000).prop_map(|length| "x".repeat(length)),
    ]
}

/// A way to hurt a valid event.
#[derive(Clone, Debug)]
enum Mutation {
    /// Remove a field (top level, or inside `data`).
    Drop { in_data: bool, field: String },
    /// Set a field to any value.
    Replace { in_data: bool, field: String, value: Value },
    /// Turn a field into another JSON type.
    Retype { in_data: bool, field: String, to: u8 },
    /// Wrap a field in `depth` arrays.
    Nest { in_data: bool, field: String, depth: usize },
    /// Add an unknown field, which must be ignored.
    Extra { in_data: bool, field: String, value: Value },
    /// Change the event's type (another entity or change).
    Type(String),
    /// Set `occurredAt` (or `data.createdAt`) to an instant of the schema's shape.
    Instant { in_data: bool, text: String },
}

/// Text of the schema's instant pattern, with years and offsets at their edges.
fn instant_text() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("0000".to_owned()), Just("0001".to_owned()), Just("9999".to_owned()), "[0-9]{4}"],
        prop_oneof![
            Just("-01-01".to_owned()),
            Just("-12-31".to_owned()),
            "-(0[1-9]|1[0-2]|00|13)-(0[1-9]|[12][0-9]|3[01]|00)"
        ],
        prop_oneof![
            Just("T00:00:00".to_owned()),
            Just("T23:59:59".to_owned()),
            "[Tt]([01][0-9]|2[0-4]):[0-5][0-9]:([0-5][0-9]|60)"
        ],
        prop::option::of("\\.[0-9]{1,12}"),
        prop_oneof![Just("Z".to_owned()), Just("z".to_owned()), "[+-]([01][0-9]|2[0-4]):[0-5][0-9]"],
    )
        .prop_map(|(year, date, time, fraction, zone)| {
            format!("{year}{date}{time}{}{zone}", fraction.unwrap_or_default())
        })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let target = || (any::<bool>(), field_name());
    prop_oneof![
        1 => target().prop_map(|(in_data, field)| Mutation::Drop { in_data, field }),
        1 => (target(), any_json()).prop_map(|((in_data, field), value)| Mutation::Replace { in_data, field, value }),
        1 => (target(), nasty_string()).prop_map(|((in_data, field), text)| Mutation::Replace {
            in_data,
            field,
            value: Value::String(text)
        }),
        1 => (target(), huge_number()).prop_map(|((in_data, field), value)| Mutation::Replace { in_data, field, value }),
        1 => (target(), 0u8..6).prop_map(|((in_data, field), to)| Mutation::Retype { in_data, field, to }),
        1 => (target(), prop_oneof![1usize..8, 100usize..140, Just(2_000usize)])
            .prop_map(|((in_data, field), depth)| Mutation::Nest { in_data, field, depth }),
        1 => (any::<bool>(), "[a-zA-Z_$]{1,12}", any_json()).prop_map(|(in_data, field, value)| Mutation::Extra {
            in_data,
            field,
            value
        }),
        1 => select(&[
            "contact.created",
            "contact.updated",
            "contact.archived",
            "contact.restored",
            "contact.deleted",
            "item.created",
            "item.updated",
            "item.archived",
            "item.restored",
            "item.deleted",
        ])
        .prop_map(|kind| Mutation::Type(kind.to_owned())),
        3 => (any::<bool>(), instant_text()).prop_map(|(in_data, text)| Mutation::Instant { in_data, text }),
    ]
}

fn huge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        select(&[
            "0",
            "-1",
            "1",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1.0",
            "1e0",
            "1e308",
            "1e309",
            "-0",
            "0.5",
            "123456789012345678901234567890",
        ])
        .prop_map(|text| serde_json::from_str(text).unwrap_or(Value::Null)),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|number| serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)),
    ]
}

/// Marks where a deeply nested value goes in the serialised text.
const PLACEHOLDER: &str = "__lectern_nested_value__";

/// `event` with `mutation` applied, as bytes.
fn mutate(mut event: Value, mutation: &Mutation) -> Vec<u8> {
    fn target(event: &mut Value, in_data: bool) -> Option<&mut Map<String, Value>> {
        if in_data {
            event.get_mut("data").and_then(Value::as_object_mut)
        } else {
            event.as_object_mut()
        }
    }
    match mutation {
        Mutation::Drop { in_data, field } => {
            if let Some(object) = target(&mut event, *in_data) {
                object.remove(field);
            }
        }
        Mutation::Replace { in_data, field, value } | Mutation::Extra { in_data, field, value } => {
            if let Some(object) = target(&mut event, *in_data) {
                object.insert(field.clone(), value.clone());
            }
        }
        Mutation::Retype { in_data, field, to } => {
            if let Some(object) = target(&mut event, *in_data) {
                let old = object.get(field).cloned().unwrap_or(Value::Null);
                let new = match to {
                    0 => Value::String(old.to_string()),
                    1 => old.as_str().and_then(|text| text.parse::<f64>().ok()).map_or(json!(1), |n| json!(n)),
                    2 => Value::Bool(!old.is_null()),
                    3 => Value::Null,
                    4 => json!([old]),
                    _ => json!({ "value": old }),
                };
                object.insert(field.clone(), new);
            }
        }
        Mutation::Nest { in_data, field, depth } => {
            if let Some(object) = target(&mut event, *in_data) {
                // Nested as text: serde_json refuses to build values this deep.
                let inner = object.get(field).cloned().unwrap_or(Value::Null).to_string();
                object.insert(field.clone(), Value::String(PLACEHOLDER.to_owned()));
                let nested = format!("{}{inner}{}", "[".repeat(*depth), "]".repeat(*depth));
                return event.to_string().replacen(&format!("\"{PLACEHOLDER}\""), &nested, 1).into_bytes();
            }
        }
        Mutation::Type(kind) => {
            event["type"] = Value::String(kind.clone());
        }
        Mutation::Instant { in_data, text } => {
            let field = if *in_data { "createdAt" } else { "occurredAt" };
            if let Some(object) = target(&mut event, *in_data) {
                object.insert(field.to_owned(), Value::String(text.clone()));
            }
        }
    }
    event.to_string().into_bytes()
}

proptest! {
    #![proptest_config(config(cases(256), regressions!("hostile/events.txt")))]

    #[test]
    fn arbitrary_bytes_are_decoded_or_refused_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes, "arbitrary bytes");
    }

    #[test]
    fn arbitrary_json_is_decoded_or_refused_without_a_panic(value in any_json()) {
        check(value.to_string().as_bytes(), "arbitrary JSON");
    }

    #[test]
    fn arbitrary_json_in_an_examples_envelope_is_decoded_or_refused_without_a_panic(
        index in 0usize..64,
        data in any_json(),
    ) {
        let examples = examples();
        let mut event = examples[index % examples.len()].1.clone();
        event["data"] = data;
        check(event.to_string().as_bytes(), "an example with arbitrary data");
    }

    #[test]
    fn mutated_examples_are_decoded_or_refused_without_a_panic(
        index in 0usize..64,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let examples = examples();
        let (name, example) = &examples[index % examples.len()];
        let mut bytes = serde_json::to_vec(example).expect("example");
        for mutation in &mutations {
            let Ok(event) = serde_json::from_slice::<Value>(&bytes) else { break };
            bytes = mutate(event, mutation);
        }
        check(&bytes, &format!("{name} mutated by {mutations:?}"));
    }

    #[test]
    fn arbitrary_subjects_never_let_an_event_in_elsewhere(
        index in 0usize..64,
        subject in prop_oneof![
            "\\PC{0,80}",
            "changes\\.[0-9a-fA-F-]{30,40}\\.(contacts|items|Contacts|item)\\.[0-9a-fA-F-]{30,40}",
        ],
    ) {
        let examples = examples();
        let (name, example) = &examples[index % examples.len()];
        let bytes = serde_json::to_vec(example).expect("example");
        let event = ChangeEvent::decode(&bytes).expect("the examples are valid");
        if let Ok(accepted) = ChangeEvent::decode_from(&subject, &bytes) {
            prop_assert_eq!(&accepted, &event);
            prop_assert!(
                subject.eq_ignore_ascii_case(&event.expected_subject()),
                "{} accepted on {:?}", name, subject
            );
        }
    }
}

/// Every example decodes and survives the checks: the mutations start from valid events.
#[test]
fn the_examples_pass_every_check() {
    for (name, example) in examples() {
        let bytes = serde_json::to_vec(&example).expect("example");
        assert!(ChangeEvent::decode(&bytes).is_ok(), "{name} is refused");
        check(&bytes, &name);
    }
}

/// The committed corpus: each file one message body, replayed through the same checks.
#[test]
fn the_event_corpus_is_decoded_or_refused_cleanly() {
    replay(&corpus_files("events", "json"), |file, bytes| check(bytes, file));
}

/// What the decoder accepts is what the API serves: every `createdAt` it lets in must
/// come out of `GET /v1/contacts/{id}` as the contract's `YYYY-MM-DDTHH:MM:SS.mmmZ`.
#[test]
fn every_created_at_the_decoder_accepts_is_served_in_the_contracts_format() {
    let world = World::shared();
    let workspace = Uuid::new_v4();
    let key = world.block_on(world.app.key(workspace, &[Scope::ContactsRead]));
    let example = examples().into_iter().find(|(name, _)| name == "contact.created.json").expect("contact example").1;
    let instants: Vec<(String, &str)> = [
        "9999-12-31T23:59:59-23:59",
        "9999-12-31T23:59:59.9999999Z",
        "0000-01-01T00:00:00+00:01",
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+23:59",
        "2016-12-31T23:59:60.999Z",
        "2025-02-03t08:00:00.123456789z",
    ]
    .into_iter()
    .map(|text| (text.to_owned(), text))
    .collect();

    replay(&instants, |_, text| {
        let mut event = example.clone();
        event["data"]["createdAt"] = Value::String((*text).to_owned());
        let Ok(decoded) = ChangeEvent::decode(event.to_string().as_bytes()) else { return };
        let Some(RecordState::Contact(data)) = decoded.state else { panic!("a contact event without its contact") };
        let mut seed = ContactSeed::named(&data.name);
        seed.created_at = data.created_at.as_datetime();
        let id = world.block_on(seed.insert(&world.app.pool, workspace));

        let reply = world.get(Some(&key), &format!("/v1/contacts/{id}"));

        reply.assert_ok();
        let served = reply.body["data"]["createdAt"].as_str().unwrap_or_default().to_owned();
        assert!(is_contract_instant(&served), "createdAt {text:?} is accepted, then served as {served:?}");
    });
}
