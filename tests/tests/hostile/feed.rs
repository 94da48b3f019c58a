//! Hostile queries on the changes feed: random, repeated and misspelled parameters,
//! percent-encoded garbage, listing cursors, tokens of the neighbour workspace or of the
//! other feed, and `limit`/`wait` edges, with keys of every kind. Each answer is held to
//! the listings' order of checks (401, 403, 400) and, for a 200, to the feed's shape
//! with only the caller's records. `wait` is only ever sent as `0` or invalid, so no case
//! is held.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;
use uuid::Uuid;

use crate::regressions;
use crate::world::{assert_clean, cases, config, enc, Access, Resource, World};

/// What `since` is, as the model sees it.
#[derive(Clone, Debug)]
enum SinceValue {
    Latest,
    /// A real token of the caller's feed of this resource.
    Own,
    /// A real token of the neighbour's feed of this resource.
    Neighbours,
    /// A real token of the caller's other feed.
    OtherFeed,
    /// A real listing cursor.
    Cursor(usize),
    Garbage(String),
}

/// One parameter of a case.
#[derive(Clone, Debug)]
enum Parameter {
    Since(SinceValue),
    Limit(String),
    Wait(String),
    /// Any other name (misspelled, a listing's, garbage), with any value.
    Other(String, String),
}

fn since_value() -> impl Strategy<Value = SinceValue> {
    prop_oneof![
        Just(SinceValue::Latest),
        Just(SinceValue::Own),
        Just(SinceValue::Neighbours),
        Just(SinceValue::OtherFeed),
        any::<usize>().prop_map(SinceValue::Cursor),
        // Never `latest` nor a token: neither starts with `~`.
        any::<String>().prop_map(|text| SinceValue::Garbage(format!("~{text}"))),
        "[A-Za-z0-9_-]{1,80}".prop_map(SinceValue::Garbage),
    ]
}

fn parameter() -> impl Strategy<Value = Parameter> {
    let number = prop_oneof![
        select(vec!["0", "1", "30", "31", "100", "101", "-1", "+5", "1e2", "1.5", "", " 5", "٣", "0100"])
            .prop_map(str::to_owned),
        any::<String>(),
    ];
    prop_oneof![
        since_value().prop_map(Parameter::Since),
        number.clone().prop_map(Parameter::Limit),
        // `0`, or anything that is not a whole number from 1 to 30: no case waits.
        prop_oneof![Just("0".to_owned()), number.prop_filter("never a wait", |text| !is_wait(text))]
            .prop_map(Parameter::Wait),
        (
            select(vec!["cursor", "search", "type", "sort", "Since", "LIMIT", "since[]", "workspace_id", "wait "]),
            any::<String>()
        )
            .prop_map(|(name, value)| Parameter::Other(name.to_owned(), value)),
    ]
}

/// Whether `text` is a `wait` that would hold the request.
fn is_wait(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 3
        && text.bytes().all(|b| b.is_ascii_digit())
        && text.parse::<u8>().is_ok_and(|n| (1..=30).contains(&n))
}

fn is_limit(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 3
        && text.bytes().all(|b| b.is_ascii_digit())
        && text.parse::<u8>().is_ok_and(|n| (1..=100).contains(&n))
}

fn feed_path(resource: Resource) -> String {
    format!("{}/changes", resource.path())
}

/// A token of `resource`'s feed taken with `key`.
fn token_of(world: &World, resource: Resource, key: &str) -> String {
    let reply = world.get(Some(key), &format!("{}?since=latest", feed_path(resource)));
    reply.assert_ok();
    reply.body["syncToken"].as_str().expect("a token").to_owned()
}

proptest! {
    #![proptest_config(config(cases(192), regressions!("hostile/feed.txt")))]

    #[test]
    fn any_feed_query_gets_the_contracts_answer_and_only_the_callers_records(
        resource in select(Resource::ALL.to_vec()),
        access in select(vec![Access::Both, Access::Both, Access::ContactsOnly, Access::ItemsOnly, Access::NoScope, Access::Invalid]),
        variant in any::<usize>(),
        parameters in prop::collection::vec(parameter(), 0..4),
    ) {
        let world = World::shared();
        let other = if resource == Resource::Contacts { Resource::Items } else { Resource::Contacts };
        let mut valid = true;
        let mut seen: Vec<&str> = Vec::new();
        let mut query = Vec::new();
        for parameter in &parameters {
            let (name, value, ok) = match parameter {
                Parameter::Since(since) => {
                    let (value, ok) = match since {
                        SinceValue::Latest => ("latest".to_owned(), true),
                        SinceValue::Own => (token_of(world, resource, world.key()), true),
                        SinceValue::Neighbours => (token_of(world, resource, &world.neighbour_key), false),
                        SinceValue::OtherFeed => (token_of(world, other, world.key()), false),
                        SinceValue::Cursor(index) => (world.cursors[index % world.cursors.len()].token.clone(), false),
                        SinceValue::Garbage(text) => (text.clone(), false),
                    };
                    ("since", value, ok)
                }
                Parameter::Limit(text) => ("limit", text.clone(), is_limit(text)),
                Parameter::Wait(text) => ("wait", text.clone(), text == "0"),
                Parameter::Other(name, value) => (name.as_str(), value.clone(), false),
            };
            valid &= ok && !seen.contains(&name);
            seen.push(name);
            query.push(format!("{}={}", enc(name), enc(&value)));
        }
        let path = if query.is_empty() { feed_path(resource) } else { format!("{}?{}", feed_path(resource), query.join("&")) };
        let key = world.key_with(access, variant);
        let reply = world.get(key.as_deref(), &path);
        let what = format!("{access:?} {path}");
        assert_clean(&reply, &what);

        let expected = if access == Access::Invalid {
            401
        } else if !access.allows(resource) {
            403
        } else if valid {
            200
        } else {
            400
        };
        prop_assert_eq!(reply.status, expected, "{}: {}", what, reply.text);
        if reply.status == 400 {
            prop_assert!(!reply.details().is_empty(), "{}: a 400 without details: {}", what, reply.text);
        }
        if reply.status == 200 {
            let mut fields: Vec<&str> = reply.body.as_object().expect("an object").keys().map(String::as_str).collect();
            fields.sort_unstable();
            prop_assert_eq!(fields, vec!["data", "hasMore", "requestId", "syncToken"]);
            let own: Vec<Uuid> = world.records[&resource].iter().map(|record| record.id).collect();
            for entry in reply.data() {
                let id = entry["id"].as_str().and_then(|id| Uuid::parse_str(id).ok()).expect("an id");
                prop_assert!(own.contains(&id), "{}: LEAK: {} is not the caller's", what, entry);
                let record = world.records[&resource].iter().find(|record| record.id == id).expect("own");
                match entry["change"].as_str() {
                    Some("upserted") => {
                        prop_assert!(record.active, "{}: an inactive record upserted: {}", what, entry);
                        prop_assert_eq!(
                            entry["record"][resource.marker_field()].as_str(),
                            Some(record.marker.as_str()),
                            "{}: another workspace's version: {}", what, entry
                        );
                    }
                    Some("removed") => {
                        prop_assert!(!record.active, "{}: an active record removed: {}", what, entry);
                        prop_assert_eq!(&entry["record"], &Value::Null);
                    }
                    _ => prop_assert!(false, "{}: no change type: {}", what, entry),
                }
            }
        }
    }
}
