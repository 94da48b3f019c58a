//! Cursors under attack. Decoding (`CursorSigner::open`) never panics and refuses,
//! with a message that says to start over, anything this server did not issue for
//! exactly this query: arbitrary text, arbitrary bytes, truncated, bit-flipped and
//! spliced real cursors, cursors under another secret, expired ones, and ones bound to
//! another workspace, resource, filter or sort. Over HTTP every such `cursor=` is a 400
//! `VALIDATION_ERROR` naming `cursor`, never a 5xx.

use std::collections::HashSet;
use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use chrono::DateTime;
use lectern_api::listing::cursor::{CursorError, CursorScope, CursorSigner};
use lectern_api::listing::{Position, SortKey};
use lectern_api::signing::SigningSecrets;
use lectern_tests::app::TEST_CURSOR_SECRET;
use lectern_tests::ContactSeed;
use proptest::prelude::*;
use proptest::sample::select;
use secrecy::SecretString;
use uuid::Uuid;

use crate::regressions;
use crate::world::{
    assert_clean, assert_only_problem, cases, config, corpus_lines, enc, form_decode, replay, Resource, World,
    CURSOR_QUERIES,
};

const DAY: Duration = Duration::from_secs(86_400);

fn signer() -> CursorSigner {
    CursorSigner::new(SigningSecrets::only(SecretString::from(TEST_CURSOR_SECRET.to_owned())), DAY)
}

/// What a cursor is bound to, owned, so strategies can make them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Scope {
    resource: &'static str,
    workspace_id: Uuid,
    kind: &'static str,
    search: Option<String>,
    sort: SortKey,
}

impl Scope {
    fn as_scope(&self) -> CursorScope<'_> {
        CursorScope {
            resource: self.resource,
            workspace_id: self.workspace_id,
            kind: self.kind,
            search: self.search.as_deref(),
            sort: self.sort,
        }
    }
}

const RESOURCES: &[&str] = &["contacts", "items"];
const KINDS: &[&str] = &["all", "customer", "supplier", "product", "service"];

/// A search the API can bind a cursor to: never NUL, which the API refuses.
fn search() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some(String::new())),
        "[^\u{0}]{1,20}".prop_map(Some),
        select(&["%", "_", "\\", "none", "\u{1}none", "a%_\\b"]).prop_map(|text| Some(text.to_owned())),
    ]
}

fn sort() -> impl Strategy<Value = SortKey> {
    prop_oneof![Just(SortKey::CreatedAt), Just(SortKey::Name)]
}

fn scope() -> impl Strategy<Value = Scope> {
    (select(RESOURCES), any::<u128>(), select(KINDS), search(), sort()).prop_map(
        |(resource, workspace, kind, search, sort)| Scope {
            resource,
            workspace_id: Uuid::from_u128(workspace),
            kind,
            search,
            sort,
        },
    )
}

/// Microseconds from year 1 to year 9999, the instants PostgreSQL and the API hold.
const MICROS: std::ops::RangeInclusive<i64> = -62_135_596_800_000_000..=253_402_300_799_999_999;

/// A position matching `sort`: mostly where records can be, sometimes anywhere a
/// position can encode (only the holder of the cursor secret can sign those).
fn position(sort: SortKey) -> BoxedStrategy<Position> {
    match sort {
        SortKey::CreatedAt => (
            prop_oneof![8 => MICROS, 1 => any::<i64>().prop_filter("an instant", |micros| {
                DateTime::from_timestamp_micros(*micros).is_some()
            })],
            any::<u128>(),
        )
            .prop_map(|(micros, id)| Position::CreatedAt {
                at: DateTime::from_timestamp_micros(micros).expect("in range"),
                id: Uuid::from_u128(id),
            })
            .boxed(),
        SortKey::Name => (prop_oneof!["\\PC{1,40}", any::<String>(), "[a-z]{300,600}", "[a\u{0}]{1,4}"], any::<u128>())
            .prop_map(|(name, id)| Position::Name { name, id: Uuid::from_u128(id) })
            .boxed(),
    }
}

/// Whether a record can sit at `position`: a four-digit UTC year, a name without NUL.
fn record_can_be_at(position: &Position) -> bool {
    match position {
        Position::CreatedAt { at, .. } => lectern_schema::Timestamp::renderable(at),
        Position::Name { name, .. } => !name.contains('\0'),
    }
}

/// A scope and a position that fits its sort.
fn bound() -> impl Strategy<Value = (Scope, Position)> {
    scope().prop_flat_map(|scope| {
        let sort = scope.sort;
        (Just(scope), position(sort))
    })
}

/// A way to alter a cursor's text or bytes.
#[derive(Clone, Debug)]
enum Alteration {
    Truncate(usize),
    FlipBit(usize, u8),
    SetByte(usize, u8),
    ReplaceChar(usize, char),
    InsertChar(usize, char),
    DeleteChar(usize),
    /// The first `.0` characters of this cursor, then another's from `.1` on.
    Splice(usize, usize),
    /// The bytes of this cursor with `.1` spliced in at `.0`.
    SpliceBytes(usize, Vec<u8>),
    AppendBytes(Vec<u8>),
    Prefix(String),
    Suffix(String),
    SwapCase(usize),
    /// Standard base64 with padding instead of URL-safe without.
    Standard,
    /// The same bytes with the tag of the other cursor.
    ForeignTag,
    /// The same bytes with the issue time replaced (e.g. pushed into the future).
    IssuedAt(i64),
}

fn alteration() -> impl Strategy<Value = Alteration> {
    let index = || any::<prop::sample::Index>().prop_map(|index| index.index(1 << 20));
    prop_oneof![
        index().prop_map(Alteration::Truncate),
        (index(), 0u8..8).prop_map(|(at, bit)| Alteration::FlipBit(at, bit)),
        (index(), any::<u8>()).prop_map(|(at, byte)| Alteration::SetByte(at, byte)),
        (index(), any::<char>()).prop_map(|(at, c)| Alteration::ReplaceChar(at, c)),
        (index(), prop_oneof![select(&['A', '-', '_', '=', '+', '/', '.', '%', ' ']), any::<char>()])
            .prop_map(|(at, c)| Alteration::InsertChar(at, c)),
        index().prop_map(Alteration::DeleteChar),
        (index(), index()).prop_map(|(a, b)| Alteration::Splice(a, b)),
        (index(), prop::collection::vec(any::<u8>(), 1..40)).prop_map(|(at, bytes)| Alteration::SpliceBytes(at, bytes)),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(Alteration::AppendBytes),
        "\\PC{1,8}".prop_map(Alteration::Prefix),
        "\\PC{1,8}".prop_map(Alteration::Suffix),
        index().prop_map(Alteration::SwapCase),
        Just(Alteration::Standard),
        Just(Alteration::ForeignTag),
        prop_oneof![Just(0i64), Just(i64::MAX), Just(i64::MIN), Just(4_102_444_800), any::<i64>()]
            .prop_map(Alteration::IssuedAt),
    ]
}

/// `token` altered; `other` is another valid cursor.
fn alter(token: &str, other: &str, alteration: &Alteration) -> String {
    let chars: Vec<char> = token.chars().collect();
    let bytes = URL_SAFE_NO_PAD.decode(token).unwrap_or_default();
    let at = |index: usize, len: usize| if len == 0 { 0 } else { index % (len + 1) };
    let with_bytes = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = bytes.clone();
        edit(&mut bytes);
        URL_SAFE_NO_PAD.encode(bytes)
    };
    match alteration {
        Alteration::Truncate(index) => chars[..at(*index, chars.len())].iter().collect(),
        Alteration::FlipBit(index, bit) => with_bytes(&|bytes| {
            let len = bytes.len().max(1);
            if let Some(byte) = bytes.get_mut(index % len) {
                *byte ^= 1 << bit;
            }
        }),
        Alteration::SetByte(index, value) => with_bytes(&|bytes| {
            let len = bytes.len().max(1);
            if let Some(byte) = bytes.get_mut(index % len) {
                *byte = *value;
            }
        }),
        Alteration::ReplaceChar(index, c) => {
            let mut chars = chars.clone();
            let len = chars.len().max(1);
            if let Some(slot) = chars.get_mut(index % len) {
                *slot = *c;
            }
            chars.into_iter().collect()
        }
        Alteration::InsertChar(index, c) => {
            let mut chars = chars.clone();
            chars.insert(at(*index, chars.len()), *c);
            chars.into_iter().collect()
        }
        Alteration::DeleteChar(index) => {
            let mut chars = chars.clone();
            if !chars.is_empty() {
                let len = chars.len();
                chars.remove(index % len);
            }
            chars.into_iter().collect()
        }
        Alteration::Splice(first, second) => {
            let others: Vec<char> = other.chars().collect();
            let head: String = chars[..at(*first, chars.len())].iter().collect();
            let tail: String = others[at(*second, others.len())..].iter().collect();
            head + &tail
        }
        Alteration::SpliceBytes(index, spliced) => with_bytes(&|bytes| {
            let position = at(*index, bytes.len());
            bytes.splice(position..position, spliced.iter().copied());
        }),
        Alteration::AppendBytes(extra) => with_bytes(&|bytes| bytes.extend_from_slice(extra)),
        Alteration::Prefix(prefix) => format!("{prefix}{token}"),
        Alteration::Suffix(suffix) => format!("{token}{suffix}"),
        Alteration::SwapCase(index) => {
            let mut chars = chars.clone();
            let len = chars.len().max(1);
            if let Some(c) = chars.get_mut(index % len) {
                *c = if c.is_ascii_uppercase() { c.to_ascii_lowercase() } else { c.to_ascii_uppercase() };
            }
            chars.into_iter().collect()
        }
        Alteration::Standard => STANDARD.encode(&bytes),
        Alteration::ForeignTag => {
            let others = URL_SAFE_NO_PAD.decode(other).unwrap_or_default();
            with_bytes(&|bytes| {
                let keep = bytes.len().saturating_sub(32);
                bytes.truncate(keep);
                bytes.extend_from_slice(&others[others.len().saturating_sub(32)..]);
            })
        }
        Alteration::IssuedAt(seconds) => with_bytes(&|bytes| {
            if bytes.len() >= 9 {
                bytes[1..9].copy_from_slice(&seconds.to_be_bytes());
            }
        }),
    }
}

/// A refusal this module accepts: a clean error whose message says to start over.
fn assert_refused(result: Result<Position, CursorError>, what: &str) -> CursorError {
    let error = result.err().unwrap_or_else(|| panic!("{what}: accepted"));
    assert!(error.to_string().contains("start a new traversal"), "{what}: {error}");
    error
}

// Decoding, without HTTP.

proptest! {
    #![proptest_config(config(cases(256), regressions!("hostile/cursor.txt")))]

    #[test]
    fn arbitrary_text_is_refused_cleanly(
        token in prop_oneof![
            any::<String>(),
            "[A-Za-z0-9_-]{0,120}",
            "[A-Za-z0-9_=+/-]{40,90}",
            prop::collection::vec(any::<u8>(), 0..200).prop_map(|bytes| URL_SAFE_NO_PAD.encode(bytes)),
            // Version 1 and long enough to reach the signature check.
            prop::collection::vec(any::<u8>(), 57..160).prop_map(|mut bytes| {
                bytes[0] = 1;
                URL_SAFE_NO_PAD.encode(bytes)
            }),
        ],
        scope in scope(),
    ) {
        assert_refused(signer().open(&token, &scope.as_scope()), "arbitrary text");
    }

    #[test]
    fn a_cursor_round_trips_and_every_alteration_of_it_is_refused(
        (scope, position) in bound(),
        (_, other_position) in bound(),
        alteration in alteration(),
    ) {
        // Only positions a record can have round-trip; others are refused as malformed.
        prop_assume!(record_can_be_at(&position));
        let token = signer().issue(&scope.as_scope(), &position);
        prop_assert_eq!(signer().open(&token, &scope.as_scope()), Ok(position));
        // Another cursor of the same scope, to splice with.
        let other_position = match (&other_position, scope.sort) {
            (Position::CreatedAt { .. }, SortKey::CreatedAt) | (Position::Name { .. }, SortKey::Name) => other_position,
            _ => signer().open(&token, &scope.as_scope()).expect("just opened"),
        };
        let other = signer().issue(&scope.as_scope(), &other_position);

        let altered = alter(&token, &other, &alteration);

        prop_assume!(altered != token && altered != other);
        assert_refused(signer().open(&altered, &scope.as_scope()), &format!("{alteration:?}"));
    }

    #[test]
    fn a_cursor_is_refused_for_any_other_workspace_resource_filter_or_sort(
        (scope, position) in bound(),
        changes in (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        other in scope(),
    ) {
        let token = signer().issue(&scope.as_scope(), &position);
        let (resource, workspace, kind, search, sort) = changes;
        let foreign = Scope {
            resource: if resource { other.resource } else { scope.resource },
            workspace_id: if workspace { other.workspace_id } else { scope.workspace_id },
            kind: if kind { other.kind } else { scope.kind },
            search: if search { other.search.clone() } else { scope.search.clone() },
            sort: if sort { other.sort } else { scope.sort },
        };
        prop_assume!(foreign != scope);

        let error = assert_refused(signer().open(&token, &foreign.as_scope()), "foreign scope");

        prop_assert_eq!(error, CursorError::Mismatch);
    }

    #[test]
    fn a_cursor_signed_with_another_secret_is_refused(
        (scope, position) in bound(),
        secret in any::<String>(),
    ) {
        prop_assume!(secret != TEST_CURSOR_SECRET);
        let theirs = CursorSigner::new(SigningSecrets::only(SecretString::from(secret)), DAY);
        let token = theirs.issue(&scope.as_scope(), &position);

        let error = assert_refused(signer().open(&token, &scope.as_scope()), "another secret");

        prop_assert_eq!(error, CursorError::Mismatch);
    }
}

#[test]
fn cursors_past_their_lifetime_are_refused_as_expired_and_alterations_stay_refused() {
    let scope = Scope {
        resource: "contacts",
        workspace_id: Uuid::new_v4(),
        kind: "all",
        search: Some("acme".to_owned()),
        sort: SortKey::Name,
    };
    let tokens: Vec<String> = (0..32)
        .map(|index| {
            let name = format!("name {index} ✓");
            signer().issue(&scope.as_scope(), &Position::Name { name, id: Uuid::new_v4() })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_100));
    let expired =
        CursorSigner::new(SigningSecrets::only(SecretString::from(TEST_CURSOR_SECRET.to_owned())), Duration::ZERO);

    for (index, token) in tokens.iter().enumerate() {
        assert!(signer().open(token, &scope.as_scope()).is_ok(), "token {index} is still fresh for a day");
        let error = assert_refused(expired.open(token, &scope.as_scope()), "expired");
        assert_eq!(error, CursorError::Expired);
        let altered = alter(token, &tokens[0], &Alteration::IssuedAt(i64::MAX));
        assert_eq!(expired.open(&altered, &scope.as_scope()), Err(CursorError::Mismatch), "re-dated token {index}");
    }
}

/// The API refuses a NUL in `search`, so the signer's `None` marker ("\0none") can
/// never collide with a real search: a cursor issued without a search is refused with
/// `search=%00none`, by the parameter check.
#[test]
fn a_search_that_spells_the_no_search_marker_is_refused_before_any_cursor_is_opened() {
    let world = World::shared();
    let own = world.cursors.iter().find(|cursor| cursor.own && cursor.query.is_empty()).expect("a plain cursor");
    let path = format!("{}?search=%00none&cursor={}", own.resource.path(), enc(&own.token));

    let reply = world.get(Some(world.key()), &path);

    assert_only_problem(&reply, "search", &path);
}

// Over HTTP.

/// The binding a listing query gives its cursor: (search, type, sort), defaults filled in.
fn binding(query: &str) -> (Option<String>, String, String) {
    let mut search = None;
    let mut kind = "all".to_owned();
    let mut sort = "createdAt".to_owned();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = form_decode(value).expect("fixed queries are UTF-8");
        match name {
            "search" => search = Some(value).filter(|text| !text.is_empty()),
            "type" => kind = value,
            "sort" => sort = value,
            _ => panic!("unexpected parameter in {query}"),
        }
    }
    (search, kind, sort)
}

/// The scope the app binds a cursor of `resource` and `query` in `workspace` to.
fn app_scope(resource: Resource, workspace: Uuid, query: &str) -> Scope {
    let (search, kind, sort) = binding(query);
    Scope {
        resource: if resource == Resource::Contacts { "contacts" } else { "items" },
        workspace_id: workspace,
        kind: KINDS.iter().find(|candidate| **candidate == kind).copied().expect("a known type"),
        search,
        sort: if sort == "name" { SortKey::Name } else { SortKey::CreatedAt },
    }
}

fn list_path(resource: Resource, query: &str, cursor: &str) -> String {
    let separator = if query.is_empty() { "" } else { "&" };
    format!("{}?limit=1{separator}{query}&cursor={}", resource.path(), enc(cursor))
}

/// A 400 naming only `cursor` and telling the client to start over.
fn assert_start_over(reply: &lectern_tests::Reply, what: &str) {
    assert_only_problem(reply, "cursor", what);
    let detail = &reply.details()[0];
    assert!(detail.contains("start a new traversal"), "{what}: {detail}");
}

/// Where a hostile cursor value comes from.
#[derive(Clone, Debug)]
enum Hostile {
    Text(String),
    /// A real cursor of the world, altered.
    Altered(usize, usize, Alteration),
    /// Signed with another secret, for exactly the request's binding.
    OtherSecret(String, Position),
    /// Signed with the right secret, for the request's query in the neighbour's workspace.
    Neighbours(Position),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    let sortless_position = prop_oneof![position(SortKey::CreatedAt), position(SortKey::Name)];
    prop_oneof![
        prop_oneof![
            any::<String>(),
            "\\PC{0,300}",
            "[A-Za-z0-9_-]{1,400}",
            prop::collection::vec(any::<u8>(), 0..300).prop_map(|bytes| URL_SAFE_NO_PAD.encode(bytes)),
            (2_040usize..2_060).prop_map(|length| "A".repeat(length)),
            Just("A".repeat(12_000)),
        ]
        .prop_map(Hostile::Text),
        (0usize..1_000, 0usize..1_000, alteration())
            .prop_map(|(cursor, other, how)| Hostile::Altered(cursor, other, how)),
        ("\\PC{0,40}", sortless_position.clone()).prop_map(|(secret, at)| Hostile::OtherSecret(secret, at)),
        sortless_position.prop_map(Hostile::Neighbours),
    ]
}

proptest! {
    #![proptest_config(config(cases(256), regressions!("hostile/cursor-http.txt")))]

    #[test]
    fn any_hostile_cursor_is_a_400_naming_cursor_never_a_5xx(
        value in hostile(),
        resource in select(Resource::ALL.to_vec()),
        query in select(CURSOR_QUERIES),
    ) {
        let world = World::shared();
        let bound = app_scope(resource, world.workspace, query);
        let (token, valid) = match &value {
            Hostile::Text(text) => (text.clone(), false),
            Hostile::Altered(index, other, alteration) => {
                let real = &world.cursors[index % world.cursors.len()];
                let other = &world.cursors[other % world.cursors.len()];
                let altered = alter(&real.token, &other.token, alteration);
                let own_context = |cursor: &crate::world::IssuedCursor| {
                    cursor.own && cursor.resource == resource && binding(&cursor.query) == binding(query)
                };
                let valid = (altered == real.token && own_context(real)) || (altered == other.token && own_context(other));
                (altered, valid)
            }
            Hostile::OtherSecret(secret, at) => {
                prop_assume!(secret != TEST_CURSOR_SECRET);
                let theirs = CursorSigner::new(SigningSecrets::only(SecretString::from(secret.clone())), DAY);
                (theirs.issue(&bound.as_scope(), at), false)
            }
            Hostile::Neighbours(at) => {
                let theirs = Scope { workspace_id: world.neighbour, ..bound.clone() };
                (signer().issue(&theirs.as_scope(), at), false)
            }
        };
        let path = list_path(resource, query, &token);

        let reply = world.get(Some(world.key()), &path);

        assert_clean(&reply, &path);
        if valid {
            reply.assert_ok();
            world.assert_own_records(resource, &reply, &path);
        } else {
            assert_start_over(&reply, &format!("{value:?} on {}{query}", resource.path()));
        }
    }

    /// Cursors signed with the server's own secret, for the request's own binding, at
    /// positions no listing produced: the server must still answer cleanly.
    #[test]
    fn a_correctly_signed_cursor_at_any_position_is_answered_cleanly(
        (resource, query, at) in (select(Resource::ALL.to_vec()), select(CURSOR_QUERIES)).prop_flat_map(|(resource, query)| {
            let sort = if binding(query).2 == "name" { SortKey::Name } else { SortKey::CreatedAt };
            (Just(resource), Just(query), position(sort))
        }),
    ) {
        let world = World::shared();
        let bound = app_scope(resource, world.workspace, query);
        let token = signer().issue(&bound.as_scope(), &at);
        let path = list_path(resource, query, &token);

        let reply = world.get(Some(world.key()), &path);

        assert_clean(&reply, &format!("{at:?} on {}?{query}", resource.path()));
        if reply.status == 200 {
            world.assert_own_records(resource, &reply, &path);
        }
    }
}

/// Every real cursor against every listing binding: accepted exactly in its own
/// workspace, resource, search, type and sort; a 400 naming `cursor` everywhere else.
#[test]
fn a_real_cursor_works_only_where_it_was_issued() {
    let world = World::shared();
    for cursor in &world.cursors {
        for resource in Resource::ALL {
            for query in CURSOR_QUERIES {
                let path = list_path(resource, query, &cursor.token);
                let own = cursor.own && cursor.resource == resource && binding(&cursor.query) == binding(query);

                let reply = world.get(Some(world.key()), &path);

                let what =
                    format!("cursor of {:?} {} (own: {}) used on {path}", cursor.resource, cursor.query, cursor.own);
                if own {
                    reply.assert_ok();
                    world.assert_own_records(resource, &reply, &what);
                } else {
                    assert_start_over(&reply, &what);
                }
            }
        }
    }
}

/// The neighbour's cursors are refused for the caller, and the caller's for the neighbour.
#[test]
fn a_cursor_never_crosses_workspaces_in_either_direction() {
    let world = World::shared();
    for cursor in &world.cursors {
        let key = if cursor.own { world.neighbour_key.clone() } else { world.key().to_owned() };
        let path = list_path(cursor.resource, &cursor.query, &cursor.token);

        let reply = world.get(Some(&key), &path);

        assert_start_over(&reply, &format!("{path} (issued in own workspace: {})", cursor.own));
    }
}

#[test]
fn an_expired_real_cursor_is_a_400_that_says_it_expired() {
    let world = World::shared();
    let wait = Duration::from_millis(1_100).saturating_sub(world.cursors_issued.elapsed());
    std::thread::sleep(wait);
    for cursor in world.cursors.iter().filter(|cursor| cursor.own) {
        let path = list_path(cursor.resource, &cursor.query, &cursor.token);

        let reply = world.get_on(&world.expiring_app, Some(world.key()), &path, &[]);

        assert_start_over(&reply, &path);
        assert!(reply.details()[0].contains("expired"), "{path}: {:?}", reply.details());
    }
}

/// Names have no length limit in the event contract, so a cursor that carries one must
/// still be accepted by the server that issued it: a name-sorted traversal over long
/// names reaches its end.
#[test]
fn a_name_sorted_traversal_reaches_the_end_whatever_the_length_of_the_names() {
    let world = World::shared();
    let workspace = Uuid::new_v4();
    let key = world.block_on(world.app.key(workspace, &[lectern_api::keys::Scope::ContactsRead]));
    let names = ["a".repeat(10), "b".repeat(1_000), "c".repeat(1_600), "日".repeat(700), "e".repeat(5_000), "f".into()];
    let mut expected = HashSet::new();
    for (index, name) in names.iter().enumerate() {
        let seed = ContactSeed::named(name).at(i64::try_from(index).unwrap_or_default());
        expected.insert(world.block_on(seed.insert(&world.app.pool, workspace)));
    }

    let mut served = HashSet::new();
    let mut path = "/v1/contacts?sort=name&limit=1".to_owned();
    loop {
        let reply = world.get(Some(&key), &path);
        assert_eq!(reply.status, 200, "{} after {} pages: {}", path.len(), served.len(), reply.text);
        for record in reply.data() {
            served.insert(Uuid::parse_str(record["id"].as_str().unwrap_or_default()).expect("an id"));
        }
        match reply.body["page"]["nextCursor"].as_str() {
            Some(cursor) => path = format!("/v1/contacts?sort=name&limit=1&cursor={}", enc(cursor)),
            None => break,
        }
    }
    assert_eq!(served, expected);
}

/// Defence in depth: a cursor that verifies is trusted, but only the holder of the
/// cursor secret can sign one at a position no record can have (a NUL in a name,
/// an instant outside PostgreSQL's range). The server must still answer cleanly.
#[test]
fn a_correctly_signed_cursor_at_a_position_no_record_can_have_is_not_a_5xx() {
    let world = World::shared();
    let name = app_scope(Resource::Contacts, world.workspace, "sort=name");
    let created = app_scope(Resource::Contacts, world.workspace, "");
    let before_postgres = DateTime::from_timestamp_micros(-211_000_000_000_000_000).expect("4717 BC");
    let cases = [
        ("sort=name", signer().issue(&name.as_scope(), &Position::Name { name: "a\0b".to_owned(), id: Uuid::nil() })),
        ("", signer().issue(&created.as_scope(), &Position::CreatedAt { at: before_postgres, id: Uuid::nil() })),
    ];
    let cases: Vec<(String, String)> =
        cases.into_iter().map(|(query, token)| (list_path(Resource::Contacts, query, &token), token)).collect();

    replay(&cases, |path, _| {
        let reply = world.get(Some(world.key()), path);
        assert_clean(&reply, path);
    });
}

/// The contract: a bad cursor is a 400 that tells the client to start a new
/// traversal; docs/api.md: "every refused cursor". A cursor that is not even UTF-8 is one.
#[test]
fn a_cursor_that_is_not_utf8_is_a_400_that_says_start_over() {
    let world = World::shared();
    for raw in ["%FF", "%C3%28", "%ED%A0%80", "AQ%80"] {
        let path = format!("/v1/contacts?cursor={raw}");

        let reply = world.get(Some(world.key()), &path);

        assert_start_over(&reply, &path);
    }
}

// The corpus.

/// `tests/corpus/cursor/*.txt`: one cursor per line, written as it appears in a query
/// string (percent-encoding allowed). Each is refused by the signer for every binding
/// and is a 400 naming only `cursor` over HTTP, on both resources.
#[test]
fn the_cursor_corpus_is_refused_cleanly() {
    let world = World::shared();
    let scopes = [
        app_scope(Resource::Contacts, world.workspace, ""),
        app_scope(Resource::Items, world.workspace, "sort=name"),
        app_scope(Resource::Contacts, world.workspace, "search=a&sort=name"),
    ];
    replay(&corpus_lines("cursor"), |line, raw| {
        if let Some(token) = form_decode(raw) {
            for scope in &scopes {
                assert_refused(signer().open(&token, &scope.as_scope()), line);
            }
        }
        for resource in Resource::ALL {
            let path = format!("{}?limit=1&cursor={raw}", resource.path());
            let reply = world.get(Some(world.key()), &path);
            assert_clean(&reply, line);
            assert_only_problem(&reply, "cursor", line);
        }
    });
}
