//! Hostile query strings and paths on every route: random and repeated parameters,
//! percent-encoding garbage, invalid UTF-8, NUL, huge values, unicode, `limit` edges,
//! `sort`/`type` junk, LIKE metacharacters and SQL text in `search`, weird record ids
//! and hostile `X-Request-Id` headers, sent with keys of every kind.
//!
//! Each answer is held to a model of the contract (`docs/api.md`): the
//! order of checks (route, 401, 403, 400), the strict query gate (unknown, repeated,
//! workspace-choosing and badly encoded parameters, each value's rule; one `details`
//! entry per problem, naming its parameter, in order), and, for a 200, exactly the
//! caller's active records that match the filter, in order, never another
//! workspace's. Whatever the input: never a 5xx, always the error shape with the code
//! of its status, always a request id.

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::sample::select;
use reqwest::Url;
use uuid::Uuid;

use crate::regressions;
use crate::world::{
    assert_clean, cases, config, corpus_lines, enc, form_decode, replay, Access, Record, Resource, World, NASTY_NAMES,
};

// The model.

/// Longest parameter name the API echoes before cutting it with `…`.
const MAX_ECHOED_NAME: usize = 64;

fn echo(name: &str) -> String {
    if name.chars().count() > MAX_ECHOED_NAME {
        format!("{}…", name.chars().take(MAX_ECHOED_NAME).collect::<String>())
    } else {
        name.to_owned()
    }
}

/// The listing parameters a query asks for, once the gate has passed it.
#[derive(Debug, Default)]
struct Listing {
    search: Option<String>,
    kind: Option<String>,
    sort: Option<String>,
    limit: Option<usize>,
    cursor: bool,
}

/// Whether `value` is acceptable for the listing parameter `name` of `resource`.
fn value_is_valid(resource: Resource, name: &str, value: &str) -> bool {
    match name {
        "search" => value.chars().count() <= 120 && !value.contains('\0'),
        "cursor" => !value.is_empty() && value.len() <= lectern_api::listing::CursorToken::MAX_LEN,
        "limit" => {
            (1..=3).contains(&value.len())
                && value.bytes().all(|byte| byte.is_ascii_digit())
                && value.parse::<u8>().is_ok_and(|limit| (1..=100).contains(&limit))
        }
        "type" => resource.types().contains(&value),
        "sort" => ["createdAt", "name"].contains(&value),
        _ => false,
    }
}

/// Why the gate refuses a parameter; the same name refused for the same reason twice is
/// one problem (the server lists each distinct problem once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Refusal {
    NameNotUtf8,
    NotAccepted,
    Repeated,
    ValueNotUtf8,
    BadValue,
}

/// Problems a 400 lists at most (`lectern_api::http::strict_query::MAX_DETAILS`).
const MAX_DETAILS: usize = lectern_api::http::strict_query::MAX_DETAILS;

/// What the strict gate finds in `query`: the name each problem must start with, with
/// its reason, in order, and the parameters it lets through. `resource` is `None` for a
/// retrieve route, which accepts no parameter.
fn gate(query: Option<&str>, resource: Option<Resource>) -> (Vec<(String, Refusal)>, Listing) {
    let accepted: &[&str] = if resource.is_some() { &["search", "cursor", "limit", "type", "sort"] } else { &[] };
    let mut problems = Vec::new();
    let mut listing = Listing::default();
    let mut seen = HashSet::new();
    for pair in query.unwrap_or_default().split('&').filter(|pair| !pair.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(name) = form_decode(raw_name) else {
            problems.push((echo(raw_name), Refusal::NameNotUtf8));
            continue;
        };
        if name.to_lowercase().contains("workspace") || !accepted.contains(&name.as_str()) {
            problems.push((echo(&name), Refusal::NotAccepted));
            continue;
        }
        if !seen.insert(name.clone()) {
            problems.push((name, Refusal::Repeated));
            continue;
        }
        let Some(value) = form_decode(raw_value) else {
            problems.push((name, Refusal::ValueNotUtf8));
            continue;
        };
        let Some(resource) = resource else { continue };
        if !value_is_valid(resource, &name, &value) {
            problems.push((name, Refusal::BadValue));
            continue;
        }
        match name.as_str() {
            "search" => listing.search = Some(value).filter(|text| !text.is_empty()),
            "type" => listing.kind = Some(value),
            "sort" => listing.sort = Some(value),
            "limit" => listing.limit = value.parse().ok(),
            _ => listing.cursor = true,
        }
    }
    (problems, listing)
}

/// What a request's path is, once the client has normalised it.
#[derive(Debug)]
enum Route {
    List(Resource),
    Get(Resource, String),
    Unknown,
}

fn route(path: &str) -> Route {
    for resource in Resource::ALL {
        if path == resource.path() {
            return Route::List(resource);
        }
        if let Some(segment) = path.strip_prefix(resource.path()).and_then(|rest| rest.strip_prefix('/')) {
            if !segment.is_empty() && !segment.contains('/') {
                return Route::Get(resource, segment.to_owned());
            }
        }
    }
    Route::Unknown
}

/// The caller's active records of `resource` that `listing` selects, in the order of
/// its sort (name order is ICU's, which the model does not know: `None` then).
fn selected<'w>(world: &'w World, resource: Resource, listing: &Listing) -> (Vec<&'w Record>, bool) {
    let needle = listing.search.as_ref().map(|text| text.to_lowercase());
    let kind = listing.kind.as_deref().unwrap_or("all");
    let mut records: Vec<&Record> = world
        .active(resource)
        .filter(|record| kind == "all" || record.kinds.contains(&kind))
        .filter(|record| needle.as_ref().is_none_or(|needle| record.search.iter().any(|field| field.contains(needle))))
        .collect();
    records.sort_by_key(|record| (record.created_at, record.id));
    let ordered = listing.sort.as_deref() != Some("name");
    (records, ordered)
}

/// Sends `path_and_query` with a key of `access` (and `request_id` as `X-Request-Id`)
/// and holds the answer to the model.
fn check(world: &World, access: Access, key_variant: usize, path_and_query: &str, request_id: Option<&str>) {
    let url = Url::parse(&world.app.url(path_and_query)).expect("a URL");
    let what = format!("{access:?} GET {}", url.as_str().chars().skip_while(|c| *c != '/').skip(2).collect::<String>());
    let what: String = what.chars().take(400).collect();
    let key = world.key_with(access, key_variant);
    let headers: Vec<(&str, &str)> = request_id.map(|id| ("X-Request-Id", id)).into_iter().collect();

    let reply = world.get_on(&world.app, key.as_deref(), path_and_query, &headers);

    assert_clean(&reply, &what);
    if let Some(sent) = request_id {
        let answered = reply.header("x-request-id").unwrap_or_default();
        assert_eq!(
            answered == sent,
            lectern_tests::app::is_request_id(sent),
            "{what}: X-Request-Id {sent:?} → {answered:?}"
        );
    }
    let (resource, id) = match route(url.path()) {
        Route::Unknown => {
            reply.assert_error(404, "NOT_FOUND");
            return;
        }
        Route::List(resource) => (resource, None),
        Route::Get(resource, segment) => (resource, Some(segment)),
    };
    if access == Access::Invalid {
        reply.assert_error(401, "UNAUTHORIZED");
        return;
    }
    if !access.allows(resource) {
        reply.assert_error(403, "FORBIDDEN");
        return;
    }
    let (mut refused, listing) = gate(url.query(), id.is_none().then_some(resource));
    let record_id = id.as_deref().map(|segment| form_decode(segment).and_then(|text| Uuid::try_parse(&text).ok()));
    if record_id == Some(None) {
        refused.insert(0, ("id".to_owned(), Refusal::BadValue));
    }
    if listing.cursor {
        // Only a cursor this server issued is valid, and the model makes none; it is
        // reported with the other problems, after them.
        refused.push(("cursor".to_owned(), Refusal::BadValue));
    }
    let mut distinct = HashSet::new();
    let mut problems: Vec<String> =
        refused.into_iter().filter(|problem| distinct.insert(problem.clone())).map(|(name, _)| name).collect();
    problems.truncate(MAX_DETAILS);
    if !problems.is_empty() {
        reply.assert_error(400, "VALIDATION_ERROR");
        let details = reply.details();
        assert_eq!(details.len(), problems.len(), "{what}: expected problems with {problems:?}, got {details:?}");
        for (detail, name) in details.iter().zip(&problems) {
            assert!(detail.starts_with(&format!("{name}:")), "{what}: {detail:?} does not start with {name:?}:");
        }
        return;
    }
    match record_id.flatten() {
        Some(id) => {
            let own = world.active(resource).any(|record| record.id == id);
            if own {
                reply.assert_ok();
                assert_eq!(world.assert_own_records(resource, &reply, &what), [id], "{what}");
            } else {
                reply.assert_error(404, "NOT_FOUND");
            }
        }
        None => check_page(world, resource, &listing, &reply, &what),
    }
}

/// A 200 page holds exactly the caller's records the listing selects, first `limit`.
fn check_page(world: &World, resource: Resource, listing: &Listing, reply: &lectern_tests::Reply, what: &str) {
    reply.assert_ok();
    let ids = world.assert_own_records(resource, reply, what);
    let (selected, ordered) = selected(world, resource, listing);
    let limit = listing.limit.unwrap_or(50);
    let has_more = selected.len() > limit;
    assert_eq!(ids.len(), selected.len().min(limit), "{what}: page size; selected {}", selected.len());
    assert_eq!(reply.body["page"]["hasMore"], has_more, "{what}");
    assert_eq!(reply.body["page"]["nextCursor"].is_string(), has_more, "{what}");
    let selected_ids: Vec<Uuid> = selected.iter().map(|record| record.id).collect();
    if ordered {
        assert_eq!(ids, selected_ids[..ids.len()], "{what}: not the first records in (createdAt, id) order");
    } else {
        let distinct: HashSet<&Uuid> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{what}: a record twice");
        assert!(ids.iter().all(|id| selected_ids.contains(id)), "{what}: a record the filter does not select");
    }
}

// Strategies.

/// Characters a client sends unencoded in a query (the `http` crate's query set),
/// except `&`, `=` and `#`, which structure the query.
const RAW: &str = "!$%'()*+,-./0123456789:;?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

fn raw_text(max: usize) -> impl Strategy<Value = String> {
    let alphabet: Vec<char> = RAW.chars().collect();
    prop::collection::vec(select(alphabet), 0..max).prop_map(String::from_iter)
}

const INVALID_UTF8: &[&str] =
    &["%FF", "%FE", "%C0%AF", "%C3%28", "%ED%A0%80", "%F4%90%80%80", "%E2%82", "%80", "%C3", "%F0%9F%98"];

/// Percent signs, escapes of every kind, and bytes that are not UTF-8.
fn percent_garbage() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("%".to_owned()),
        "%[0-9A-Fa-f]",
        "%[0-9A-Fa-f]{2}",
        "%[G-Zg-z%+]{1,2}",
        select(INVALID_UTF8).prop_map(str::to_owned),
        Just("%00".to_owned()),
        Just("%2B".to_owned()),
        Just("%26".to_owned()),
        Just("%3D".to_owned()),
        "[a-z+]{0,3}",
    ];
    prop::collection::vec(piece, 1..8).prop_map(|pieces| pieces.concat())
}

/// How a logical value is written into the query.
fn encoded(text: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (text, 0u8..4).prop_map(|(text, how)| match how {
        // Every byte outside the unreserved set escaped.
        0 | 1 => enc(&text),
        // Form style: `+` for a space.
        2 => enc(&text).replace("%20", "+"),
        // As is where that is possible, escaped where it is not.
        _ => text
            .chars()
            .map(|c| if RAW.contains(c) && c != '%' && c != '+' { c.to_string() } else { enc(&c.to_string()) })
            .collect(),
    })
}

const LIMITS: &[&str] = &[
    "0",
    "1",
    "50",
    "99",
    "100",
    "101",
    "-1",
    "+1",
    "%2B1",
    "1.0",
    "1e2",
    "%201",
    "1%20",
    "01",
    "001",
    "0001",
    "0100",
    "100%00",
    "255",
    "256",
    "65536",
    "4294967296",
    "18446744073709551616",
    "%D9%A3",
    "%EF%BC%91",
    "abc",
    "",
    "%31%30%30",
    "0x10",
    "1_0",
    "1,0",
    "NaN",
    "Infinity",
    "null",
];

const SORTS: &[&str] = &[
    "createdAt",
    "name",
    "CreatedAt",
    "NAME",
    "created_at",
    "createdAt%20",
    "-name",
    "name,createdAt",
    "",
    "%6Eame",
    "name%00",
    "createdAt;DROP",
    "id",
    "email",
    "random()",
    "name%20desc",
];

const TYPES: &[&str] = &[
    "all",
    "customer",
    "supplier",
    "product",
    "service",
    "ALL",
    "Customer",
    "",
    "%61ll",
    "all%00",
    "both",
    "*",
    "%",
    "customer,supplier",
    "null",
    "type",
];

const SEARCHES: &[&str] = &[
    "%",
    "_",
    "\\",
    "%%",
    "__",
    "\\\\",
    "\\%",
    "\\_",
    "%_\\",
    "50%",
    "50% ",
    "a_b",
    "a%b",
    "a\\b",
    "_%",
    "%a%",
    "x",
    "X-0",
    "X-00",
    "_%x",
    "acme",
    "ACME",
    "Acme GmbH",
    "gmbh",
    "@",
    ".example",
    "user1",
    "' OR 1=1 --",
    "'; DROP TABLE contacts; --",
    "\" OR \"\"=\"",
    "$1",
    "$$",
    "\\x00",
    "E'\\\\'",
    "1) OR (1=1",
    "*",
    "?",
    "[a-z]",
    "(",
    ")",
    "{}",
    "~",
    "zoë",
    "ZOË",
    "日本",
    "😀",
    "\t",
    "\n",
    "h\nu",
    "\r\n",
    "ß",
    "İ",
    "ǅ",
    " ",
    "  ",
];

/// `search` values: LIKE metacharacters, SQL text, unicode, and the lengths around 120.
fn search_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(SEARCHES).prop_map(str::to_owned),
        2 => select(NASTY_NAMES).prop_map(str::to_owned),
        2 => "\\PC{0,20}",
        1 => prop::collection::vec(any::<char>(), 0..30).prop_map(String::from_iter),
        1 => (119usize..=122, select(&["a", "ä", "%", "😀", "_"][..])).prop_map(|(count, c)| c.repeat(count)),
        1 => select(&["a\0b", "\0", "%\0"][..]).prop_map(str::to_owned),
    ]
}

/// A value for `name`, from the name's own domain mostly.
fn value_for(name: &str) -> BoxedStrategy<String> {
    let known = match name {
        "limit" => prop_oneof![
            select(LIMITS).prop_map(str::to_owned),
            (0u32..300).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string())
        ]
        .boxed(),
        "sort" => prop_oneof![select(SORTS).prop_map(str::to_owned), "\\PC{0,12}"].boxed(),
        "type" => prop_oneof![select(TYPES).prop_map(str::to_owned), "\\PC{0,12}"].boxed(),
        "search" => encoded(search_value()).boxed(),
        "cursor" => prop_oneof![Just(String::new()), encoded("\\PC{1,40}"), "[A-Za-z0-9_-]{40,120}"].boxed(),
        _ => encoded("\\PC{0,12}").boxed(),
    };
    prop_oneof![
        12 => known,
        2 => percent_garbage(),
        2 => raw_text(24),
        1 => (100usize..8_000).prop_map(|length| "a".repeat(length)),
        1 => Just("%C3%A4".repeat(1_500)),
    ]
    .boxed()
}

const NAMES: &[&str] = &[
    "search",
    "cursor",
    "limit",
    "type",
    "sort",
    "%73earch",
    "se%61rch",
    "l%69mit",
    "Limit",
    "SORT",
    "type%00",
    "workspace",
    "workspaceId",
    "workspace_id",
    "WorkspaceID",
    "x-workspace",
    "%77orkspace",
    "filter%5Bworkspace%5D",
    "wOrKsPaCe",
    "tenant",
    "tenantId",
    "id",
    "page",
    "offset",
    "per_page",
    "q",
    "filter",
    "fields",
    "include",
    "api_key",
    "X-API-Key",
    "callback",
    "format",
    "__proto__",
    "constructor",
    "search%5B%5D",
    "limit%5B0%5D",
    "",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(&["search", "cursor", "limit", "type", "sort"][..]).prop_map(str::to_owned),
        3 => select(NAMES).prop_map(str::to_owned),
        1 => encoded("\\PC{0,10}"),
        1 => percent_garbage(),
        1 => raw_text(12),
        1 => (65usize..3_000).prop_map(|length| "n".repeat(length)),
    ]
}

/// One `name=value` pair (or a bare name).
fn pair() -> impl Strategy<Value = String> {
    (name(), any::<bool>()).prop_flat_map(|(name, bare)| {
        let value = value_for(&form_decode(&name).unwrap_or_default());
        (Just(name), Just(bare), value).prop_map(|(name, bare, value)| {
            if bare && value.len() % 4 == 0 {
                name
            } else {
                format!("{name}={value}")
            }
        })
    })
}

/// Longest query a case sends, within the server's 16 KiB request head (longer heads
/// have a test of their own).
const MAX_QUERY: usize = 12_000;

/// A whole query string, without the `?`.
fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (prop::collection::vec(pair(), 0..6), any::<u8>()).prop_map(|(mut pairs, shape)| {
            // A URI longer than 64 KiB cannot even be sent.
            while pairs.iter().map(String::len).sum::<usize>() > MAX_QUERY {
                pairs.pop();
            }
            let mut query = pairs.join("&");
            if shape % 7 == 0 {
                query = format!("&{query}&&");
            }
            query
        }),
        1 => raw_text(60).prop_map(|text| text.replace('#', "")),
        1 => prop::collection::vec(prop_oneof![raw_text(10), Just("&".to_owned()), Just("=".to_owned()), percent_garbage()], 0..12)
            .prop_map(|parts| parts.concat()),
    ]
}

/// A record id segment: the caller's, the neighbour's, shared, unknown, spelled every
/// way a UUID can be, and things that are not UUIDs.
fn id_segment() -> impl Strategy<Value = (u8, usize, String)> {
    (0u8..14, any::<usize>(), prop_oneof![raw_text(40), percent_garbage(), encoded("\\PC{0,40}")])
}

fn render_id(world: &World, resource: Resource, (how, index, junk): &(u8, usize, String)) -> String {
    let own = &world.records[&resource];
    let theirs = &world.neighbour_ids[&resource];
    let mine = own[index % own.len()].id;
    let foreign = theirs[index % theirs.len()];
    let shared = world.shared_ids[index % world.shared_ids.len()];
    match how {
        0 | 1 => mine.to_string(),
        2 => foreign.to_string(),
        3 => shared.to_string(),
        4 => Uuid::from_u128(*index as u128).to_string(),
        5 => mine.to_string().to_uppercase(),
        6 => mine.simple().to_string(),
        7 => format!("%7B{mine}%7D"),
        8 => format!("urn:uuid:{foreign}"),
        9 => format!("{mine}{junk}"),
        10 => enc(&mine.to_string()),
        11 => select_weird(*index).to_owned(),
        _ => junk.clone(),
    }
}

fn select_weird(index: usize) -> &'static str {
    const WEIRD: &[&str] = &[
        "",
        ".",
        "..",
        "%2e%2e",
        "%2E",
        "a%2Fb",
        "%2F",
        "%5C",
        "null",
        "undefined",
        "0",
        "-1",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "%00",
        "%FF",
        "'%20OR%20'1'='1",
        "*",
        "%25",
        "+",
        "%20",
        "1ec7e4a1-0000-4000-8000-000000000001",
    ];
    WEIRD[index % WEIRD.len()]
}

/// A hostile `X-Request-Id`: well-formed, almost well-formed, or not at all.
fn request_id() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        1 => "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}".prop_map(Some),
        1 => "[!-~]{0,140}".prop_map(Some),
        1 => select(vec![
            "_abc".to_owned(),
            "-abc".to_owned(),
            "ab_cd".to_owned(),
            "x:y.z-1".to_owned(),
            "a".repeat(128),
            "a".repeat(129),
        ])
        .prop_map(Some),
    ]
}

fn access() -> impl Strategy<Value = (Access, usize)> {
    (
        prop_oneof![
            14 => Just(Access::Both),
            2 => Just(Access::ContactsOnly),
            2 => Just(Access::ItemsOnly),
            1 => Just(Access::NoScope),
            2 => Just(Access::Invalid),
        ],
        any::<usize>(),
    )
}

fn with_query(path: &str, query: &str) -> String {
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

proptest! {
    #![proptest_config(config(cases(256), regressions!("hostile/query.txt")))]

    #[test]
    fn any_query_on_a_listing_gets_the_contracts_answer(
        resource in select(Resource::ALL.to_vec()),
        query in query(),
        (access, variant) in access(),
        request_id in request_id(),
    ) {
        let world = World::shared();
        check(world, access, variant, &with_query(resource.path(), &query), request_id.as_deref());
    }

    #[test]
    fn any_id_and_query_on_a_retrieve_route_gets_the_contracts_answer(
        resource in select(Resource::ALL.to_vec()),
        id in id_segment(),
        query in prop_oneof![3 => Just(String::new()), 1 => query()],
        (access, variant) in access(),
    ) {
        let world = World::shared();
        let path = format!("{}/{}", resource.path(), render_id(world, resource, &id));
        check(world, access, variant, &with_query(&path, &query), None);
    }

    #[test]
    fn any_valid_listing_query_lists_exactly_the_callers_matching_records(
        resource in select(Resource::ALL.to_vec()),
        search in prop::option::of(encoded(search_value())),
        kind in prop::option::of(0usize..3),
        sort in prop::option::of(select(&["createdAt", "name"][..])),
        limit in prop::option::of(prop_oneof![Just(1u8), Just(2), Just(100), 1u8..=100]),
    ) {
        let world = World::shared();
        let mut pairs = Vec::new();
        if let Some(search) = search {
            pairs.push(format!("search={search}"));
        }
        if let Some(kind) = kind {
            pairs.push(format!("type={}", resource.types()[kind]));
        }
        if let Some(sort) = sort {
            pairs.push(format!("sort={sort}"));
        }
        if let Some(limit) = limit {
            pairs.push(format!("limit={limit}"));
        }
        check(world, Access::Both, 0, &with_query(resource.path(), &pairs.join("&")), None);
    }
}

/// The contract's order of checks is 401 → 429 → 403 → 400, and a malformed id is a
/// 400 naming `id`, reported with the query's problems. An id whose percent-escapes
/// are not UTF-8 is a malformed id like any other.
#[test]
fn a_record_id_that_is_not_utf8_is_checked_after_the_key_and_named_id() {
    let world = World::shared();
    for path in ["/v1/contacts/%FF", "/v1/items/%C3", "/v1/contacts/%aA?workspace=x"] {
        for (access, expected) in
            [(Access::Invalid, "UNAUTHORIZED"), (Access::NoScope, "FORBIDDEN"), (Access::Both, "VALIDATION_ERROR")]
        {
            let key = world.key_with(access, 0);

            let reply = world.get(key.as_deref(), path);

            let status = match expected {
                "UNAUTHORIZED" => 401,
                "FORBIDDEN" => 403,
                _ => 400,
            };
            reply.assert_error(status, expected);
            if status == 400 {
                let details = reply.details();
                assert!(details.first().is_some_and(|detail| detail.starts_with("id:")), "{path}: {details:?}");
                assert_eq!(details.len(), 1 + usize::from(path.contains('?')), "{path}: {details:?}");
            }
        }
    }
}

/// A request head longer than the server reads is refused, and like every response
/// in the contract's error shape, with the code `docs/api.md` gives its status and a
/// request id ("every response, success or error, carries a request identifier").
#[test]
fn a_request_head_over_the_servers_limit_is_refused_in_the_error_shape() {
    let world = World::shared();
    for length in [20_000, 60_000] {
        let path = format!("/v1/contacts?search={}", "a".repeat(length));

        let reply = world.get(Some(world.key()), &path);

        let what = format!("a {length}-character search");
        assert!([400, 414, 431].contains(&reply.status), "{what}: {} {:?}", reply.status, reply.text);
        let request_id = reply.header("x-request-id");
        assert!(
            reply.body.is_object() && request_id.is_some(),
            "{what}: {} with body {:?} and X-Request-Id {request_id:?}",
            reply.status,
            reply.text
        );
        assert_clean(&reply, &what);
    }
}

// The corpus.

/// `tests/corpus/query/*.txt`: a line starting with `/` is a path (and query) sent as
/// is; any other line is a query string sent to both listings and to both retrieve
/// routes (with one of the caller's ids). Every answer is held to the same model, for
/// a key with both scopes and for a key with none.
#[test]
fn the_query_corpus_gets_the_contracts_answers() {
    let world = World::shared();
    replay(&corpus_lines("query"), |_, line| {
        let targets: Vec<String> = if line.starts_with('/') {
            vec![line.clone()]
        } else {
            Resource::ALL
                .iter()
                .flat_map(|resource| {
                    let id = world.records[resource][0].id;
                    [with_query(resource.path(), line), with_query(&format!("{}/{id}", resource.path()), line)]
                })
                .collect()
        };
        for target in targets {
            for access in [Access::Both, Access::NoScope, Access::Invalid] {
                check(world, access, 0, &target, None);
            }
        }
    });
}
