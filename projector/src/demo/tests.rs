#![allow(clippy::unwrap_used, clippy::expect_used, reason = "in tests, a failed expectation is the test failing")]

use std::collections::{BTreeMap, BTreeSet};

use lectern_schema::events::RecordState;

use super::*;

fn decoded(workspace: Uuid) -> Vec<(DemoEvent, ChangeEvent)> {
    demo_events(workspace)
        .into_iter()
        .map(|event| {
            let decoded = ChangeEvent::decode_from(&event.subject, event.json.as_bytes())
                .unwrap_or_else(|error| panic!("{error}: {}", event.json));
            (event, decoded)
        })
        .collect()
}

#[test]
fn the_demo_is_the_same_bytes_on_every_call() {
    assert_eq!(demo_events(DEMO_WORKSPACE), demo_events(DEMO_WORKSPACE));
}

#[test]
fn another_workspace_gets_other_ids_so_jetstream_never_mistakes_its_events_for_repeats() {
    let ours: BTreeSet<Uuid> = demo_events(DEMO_WORKSPACE).iter().map(|event| event.event_id).collect();
    let theirs = demo_events(Uuid::from_u128(42));
    assert!(theirs.iter().all(|event| !ours.contains(&event.event_id)));
    assert!(theirs.iter().all(|event| event.subject.contains("00000000-0000-0000-0000-00000000002a")));
}

#[test]
fn every_event_is_valid_on_its_subject_and_agrees_with_its_summary() {
    for (event, decoded) in decoded(DEMO_WORKSPACE) {
        assert_eq!(decoded.event_id, event.event_id);
        assert_eq!(decoded.event_type, event.event_type);
        assert_eq!(decoded.entity_id, event.entity_id);
        assert_eq!(decoded.version, event.version);
        assert_eq!(decoded.workspace_id, DEMO_WORKSPACE);
    }
}

#[test]
fn event_ids_are_unique_and_each_record_counts_its_versions_up_from_one_in_time_order() {
    let events = decoded(DEMO_WORKSPACE);
    let ids: BTreeSet<Uuid> = events.iter().map(|(event, _)| event.event_id).collect();
    assert_eq!(ids.len(), events.len());
    let mut versions: BTreeMap<Uuid, i64> = BTreeMap::new();
    for pair in events.windows(2) {
        assert!(pair[0].1.occurred_at <= pair[1].1.occurred_at, "events are published in time order");
    }
    for (event, _) in &events {
        let last = versions.insert(event.entity_id, event.version).unwrap_or(0);
        assert_eq!(event.version, last + 1, "{}", event.json);
    }
}

#[test]
fn the_demo_holds_three_hundred_contacts_and_two_hundred_items_of_which_a_tenth_are_archived() {
    let events = demo_events(DEMO_WORKSPACE);
    let kinds = |change: ChangeKind, entity: EntityKind| {
        events.iter().filter(|event| event.event_type == EventType { entity, change }).count()
    };

    assert_eq!(record_counts(&events), DemoCounts { contacts: DEMO_CONTACTS, items: DEMO_ITEMS });
    assert_eq!(expected_active_counts(&events), DemoCounts { contacts: 269, items: 179 });
    assert_eq!(events.len(), 654);
    assert_eq!(kinds(ChangeKind::Updated, EntityKind::Contact), 60);
    assert_eq!(kinds(ChangeKind::Updated, EntityKind::Item), 40);
    assert_eq!(kinds(ChangeKind::Archived, EntityKind::Contact), 31, "30 stay archived, one is restored");
    assert_eq!(kinds(ChangeKind::Archived, EntityKind::Item), 20);
    assert_eq!(kinds(ChangeKind::Restored, EntityKind::Contact), 1);
    assert_eq!(kinds(ChangeKind::Deleted, EntityKind::Contact), 1);
    assert_eq!(kinds(ChangeKind::Deleted, EntityKind::Item), 1);
    assert_eq!(events.last().map(|event| event.event_type.change), Some(ChangeKind::Deleted));
}

#[test]
fn contacts_are_customers_and_suppliers_from_many_countries_with_distinct_names() {
    let contacts: Vec<_> = decoded(DEMO_WORKSPACE)
        .into_iter()
        .filter(|(event, _)| event.event_type.change == ChangeKind::Created)
        .filter_map(|(_, decoded)| match decoded.state {
            Some(RecordState::Contact(contact)) => Some(contact),
            _ => None,
        })
        .collect();
    let names: BTreeSet<&str> = contacts.iter().map(|contact| contact.name.as_str()).collect();
    assert_eq!(names.len(), contacts.len(), "names are distinct");
    assert!(contacts.iter().any(|contact| contact.is_customer && !contact.is_supplier));
    assert!(contacts.iter().any(|contact| !contact.is_customer && contact.is_supplier));
    assert!(contacts.iter().any(|contact| contact.is_customer && contact.is_supplier));
    assert!(contacts.iter().all(|contact| contact.is_customer || contact.is_supplier));
    let tins: Vec<&str> = contacts.iter().filter_map(|contact| contact.tin.as_deref()).collect();
    for prefix in ["DE", "ATU", "CHE-", "FR", "GB", "SE556", "NL", "ESB", "IT"] {
        assert!(tins.iter().any(|tin| tin.starts_with(prefix)), "no {prefix} tax number");
    }
    let ein = |tin: &&str| tin.len() == 10 && tin.as_bytes()[2] == b'-';
    assert!(tins.iter().any(ein), "no US EIN");
    let phones: BTreeSet<&str> =
        contacts.iter().filter_map(|contact| contact.phone.as_deref()?.split(' ').next()).collect();
    assert!(phones.len() >= 8, "calling codes: {phones:?}");
    assert!(contacts.iter().any(|contact| contact.email.is_none()), "some contacts have no email");
    assert!(contacts.iter().all(|contact| contact.email.as_deref().is_none_or(|email| email.ends_with(".example"))));
}

#[test]
fn french_vat_ids_carry_the_key_computed_from_the_siren() {
    for event in demo_events(DEMO_WORKSPACE) {
        let Ok(value) = serde_json::from_str::<Value>(&event.json) else { continue };
        let Some(tin) = value["data"]["tin"].as_str().and_then(|tin| tin.strip_prefix("FR")) else { continue };
        let (key, siren) = tin.split_at(2);
        let siren: i64 = siren.parse().unwrap();
        assert_eq!(key.parse::<i64>().unwrap(), (12 + 3 * (siren % 97)) % 97, "FR{tin}");
    }
}

#[test]
fn items_are_products_and_services_priced_in_many_currencies_with_their_minor_units() {
    let items: Vec<_> = decoded(DEMO_WORKSPACE)
        .into_iter()
        .filter_map(|(_, decoded)| match decoded.state {
            Some(RecordState::Item(item)) => Some(item),
            _ => None,
        })
        .collect();
    assert!(items.iter().any(|item| item.kind == ItemType::Product));
    assert!(items.iter().any(|item| item.kind == ItemType::Service));
    assert!(items.iter().any(|item| item.purchase_price.is_none()), "some have no purchase price");
    assert!(items.iter().any(|item| item.sale_price.is_none()), "some are bought, never sold");
    assert!(items.iter().any(|item| item.sku.is_none()) && items.iter().any(|item| item.description.is_none()));
    let prices = items.iter().flat_map(|item| item.sale_price.iter().chain(item.purchase_price.iter()));
    let mut currencies = BTreeSet::new();
    for price in prices {
        let (currency, amount) = (price.currency.as_str(), price.amount.as_str());
        let places = amount.split_once('.').map_or(0, |(_, fraction)| fraction.len());
        assert_eq!(places, if currency == "JPY" { 0 } else { 2 }, "{amount} {currency}");
        currencies.insert(currency);
    }
    assert!(currencies.len() >= 5, "{currencies:?}");
    for currency in ["EUR", "USD", "GBP", "SEK", "CHF"] {
        assert!(currencies.contains(currency), "no {currency} price");
    }
    let credits =
        items.iter().filter_map(|item| item.sale_price.as_ref()).filter(|price| price.amount.as_str().starts_with('-'));
    assert!(credits.count() >= 1, "credits have negative prices");
}

#[test]
fn instants_are_fixed_in_2025_and_2026() {
    assert_eq!(instant(CREATED_FROM), "2025-01-06T00:00:00.000Z");
    assert_eq!(instant(UPDATED_FROM), "2026-01-05T00:00:00.000Z");
    assert_eq!(instant(ARCHIVED_FROM), "2026-03-02T00:00:00.000Z");
    assert_eq!(instant(RESTORED_AT), "2026-04-07T10:00:00.000Z");
    assert_eq!(instant(CONTACT_DELETED_AT), "2026-04-14T09:00:00.000Z");
    assert_eq!(instant(ITEM_DELETED_AT), "2026-04-15T09:30:00.000Z");
    for (_, decoded) in decoded(DEMO_WORKSPACE) {
        let year = decoded.occurred_at.to_string();
        assert!(year.starts_with("2025-") || year.starts_with("2026-"), "{year}");
    }
}

#[test]
fn amounts_are_written_with_exactly_the_currencys_places() {
    assert_eq!(amount(14_900, 2), "149.00");
    assert_eq!(amount(7, 2), "0.07");
    assert_eq!(amount(-2_050, 2), "-20.50");
    assert_eq!(amount(4_980, 0), "4980");
}
