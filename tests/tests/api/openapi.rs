//! The OpenAPI document: served, committed and generated copies are one document, it
//! states the contract exactly, the strict query gate allows what it documents, and
//! what the app really answers has the shapes it declares.

// The helpers below fail the test on a broken document, as the tests themselves do.
#![expect(clippy::expect_used, reason = "test helpers panic with the reason, like the tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use lectern_api::http::contacts::ListContactsQuery;
use lectern_api::http::contracts::NoQuery;
use lectern_api::http::items::ListItemsQuery;
use lectern_api::http::strict_query::QueryContract;
use lectern_tests::app::is_request_id;
use lectern_tests::{ContactSeed, Reply, TestApp, TestDatabase};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::items::ItemSeed;

const REGENERATE: &str = "regenerate with `cargo run -p lectern-api -- openapi > schema/openapi.json`";

/// What a [`QueryContract`] allows: each parameter's name and value check.
type AllowList = [(&'static str, fn(&str) -> Result<(), String>)];

/// The description's error codes, in its order.
const ERROR_CODES: [&str; 13] = [
    "VALIDATION_ERROR",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "NOT_FOUND",
    "CONFLICT",
    "UNPROCESSABLE_ENTITY",
    "PLAN_LIMIT_REACHED",
    "BOOKS_LOCKED",
    "IDEMPOTENCY_CONFLICT",
    "RATE_LIMITED",
    "SERVICE_UNAVAILABLE",
    "REQUEST_FAILED",
    "INTERNAL_ERROR",
];

/// The Contact's fields, as the description lists them.
const CONTACT_FIELDS: [&str; 9] =
    ["id", "name", "email", "phone", "address", "tin", "isCustomer", "isSupplier", "createdAt"];

/// The Item's fields, as `docs/api.md` lists them.
const ITEM_FIELDS: [&str; 9] =
    ["id", "name", "sku", "description", "type", "unit", "salePrice", "purchasePrice", "createdAt"];

/// The only media type the document may name for a body: what clients' typed helpers
/// look bodies up by (the served `; charset=utf-8` is a parameter of it).
const JSON: &str = "application/json";

/// The document the code generates, parsed.
fn document() -> Value {
    serde_json::from_str(&lectern_api::http::openapi::document()).expect("the generated document is JSON")
}

fn committed_document() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schema/openapi.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}; {REGENERATE}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("schema/openapi.json is not JSON ({error}); {REGENERATE}"))
}

/// The first place where `left` and `right` differ, as a JSON pointer.
fn first_difference(left: &Value, right: &Value, at: &str) -> Option<String> {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            keys.into_iter().find_map(|key| match (l.get(key), r.get(key)) {
                (Some(a), Some(b)) => first_difference(a, b, &format!("{at}/{key}")),
                _ => Some(format!("{at}/{key}")),
            })
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            l.iter().zip(r).enumerate().find_map(|(index, (a, b))| first_difference(a, b, &format!("{at}/{index}")))
        }
        _ if left == right => None,
        _ => Some(if at.is_empty() { "/".to_owned() } else { at.to_owned() }),
    }
}

fn schema<'a>(document: &'a Value, name: &str) -> &'a Value {
    let found = &document["components"]["schemas"][name];
    assert!(found.is_object(), "no components.schemas.{name}");
    found
}

/// `value`, or the schema its `$ref` names.
fn resolve<'a>(document: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
            schema(document, name)
        }
        None => value,
    }
}

fn operation<'a>(document: &'a Value, path: &str) -> &'a Value {
    let found = &document["paths"][path]["get"];
    assert!(found.is_object(), "no GET {path} in the document");
    found
}

fn list_contacts(document: &Value) -> &Value {
    operation(document, "/v1/contacts")
}

fn get_contact(document: &Value) -> &Value {
    operation(document, "/v1/contacts/{id}")
}

fn list_items(document: &Value) -> &Value {
    operation(document, "/v1/items")
}

fn get_item(document: &Value) -> &Value {
    operation(document, "/v1/items/{id}")
}

fn statuses(operation: &Value) -> Vec<&str> {
    operation["responses"].as_object().expect("responses").keys().map(String::as_str).collect()
}

/// The schema of the single (JSON) body a response declares.
fn response_schema<'a>(document: &'a Value, operation: &'a Value, status: &str) -> &'a Value {
    let content = operation["responses"][status]["content"].as_object().expect("response content");
    assert_eq!(content.len(), 1, "{status}: one content type expected: {content:?}");
    let (kind, body) = content.iter().next().expect("one content type");
    assert_eq!(kind, JSON, "{status}: content type");
    resolve(document, &body["schema"])
}

fn query_parameters(operation: &Value) -> Vec<&Value> {
    operation["parameters"]
        .as_array()
        .map(|all| all.iter().filter(|p| p["in"] == "query").collect())
        .unwrap_or_default()
}

fn parameter<'a>(operation: &'a Value, name: &str) -> &'a Value {
    query_parameters(operation)
        .into_iter()
        .find(|parameter| parameter["name"] == name)
        .unwrap_or_else(|| panic!("no query parameter {name}"))
}

fn property_names(schema: &Value) -> BTreeSet<&str> {
    schema["properties"].as_object().expect("properties").keys().map(String::as_str).collect()
}

fn required_names(schema: &Value) -> BTreeSet<&str> {
    schema["required"].as_array().map(|all| all.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// `schema` has exactly `fields`, all required, and no other property is allowed.
fn assert_closed_with_exactly_required(schema: &Value, fields: &[&str]) {
    let expected: BTreeSet<&str> = fields.iter().copied().collect();
    assert_eq!(property_names(schema), expected, "{}", schema["title"]);
    assert_eq!(required_names(schema), expected, "{}", schema["title"]);
    assert_eq!(schema["additionalProperties"], false, "{}", schema["title"]);
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().map(|all| all.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// The JSON types a schema names (`type` is a name or, in OpenAPI 3.1, a list).
fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(kind) => vec![kind.as_str()],
        kinds => strings(kinds),
    }
}

/// Whether `schema` accepts null, as JSON Schema says it: `null` among its types, or a
/// choice that accepts it. (OpenAPI 3.0's `nullable` is not JSON Schema, and is refused
/// elsewhere.)
fn allows_null(document: &Value, schema: &Value) -> bool {
    let schema = resolve(document, schema);
    types(schema).contains(&"null")
        || ["anyOf", "oneOf"].iter().any(|choice| {
            schema[choice].as_array().is_some_and(|choices| choices.iter().any(|c| allows_null(document, c)))
        })
}

/// How many of `choices` `value` conforms to.
fn matching(document: &Value, choices: &[Value], value: &Value, at: &str) -> usize {
    choices
        .iter()
        .filter(|choice| {
            let mut inner = Vec::new();
            conform(document, choice, value, at, &mut inner);
            inner.is_empty()
        })
        .count()
}

/// A light structural check of `value` against `schema`: types, nullability, enums,
/// constants, lengths, bounds, uuid/date-time formats, required and closed objects, anyOf,
/// oneOf.
/// Patterns are not checked here (no regex engine among the dependencies).
fn conform(document: &Value, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = resolve(document, schema);
    if value.is_null() {
        if !allows_null(document, schema) {
            problems.push(format!("{at}: null where the schema does not allow it"));
        }
        return;
    }
    if let Some(choices) = schema["anyOf"].as_array() {
        if matching(document, choices, value, at) == 0 {
            problems.push(format!("{at}: matches none of anyOf's schemas"));
        }
        return;
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let matching = matching(document, choices, value, at);
        if matching != 1 {
            problems.push(format!("{at}: matches {matching} of oneOf's schemas, not exactly one"));
        }
        return;
    }
    let kinds = types(schema);
    let kind_ok = kinds.is_empty()
        || kinds.iter().any(|kind| match *kind {
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
    if !kind_ok {
        problems.push(format!("{at}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            problems.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let Some(constant) = schema.get("const") {
        if value != constant {
            problems.push(format!("{at}: {value} is not the constant {constant}"));
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|min| length < min) {
            problems.push(format!("{at}: {text:?} is shorter than minLength"));
        }
        if schema["maxLength"].as_u64().is_some_and(|max| length > max) {
            problems.push(format!("{at}: {text:?} is longer than maxLength"));
        }
        match schema["format"].as_str() {
            Some("uuid") if Uuid::try_parse(text).is_err() => problems.push(format!("{at}: {text:?} is not a uuid")),
            Some("date-time") if chrono::DateTime::parse_from_rfc3339(text).is_err() => {
                problems.push(format!("{at}: {text:?} is not a date-time"));
            }
            Some("email") if !text.contains('@') => problems.push(format!("{at}: {text:?} is not an email")),
            _ => {}
        }
    }
    if let Some(actual) = value.as_f64() {
        if number(&schema["minimum"]).is_some_and(|min| actual < min) {
            problems.push(format!("{at}: {actual} is below minimum"));
        }
        if number(&schema["maximum"]).is_some_and(|max| actual > max) {
            problems.push(format!("{at}: {actual} is above maximum"));
        }
    }
    if let (Some(items), Some(elements)) = (schema.get("items"), value.as_array()) {
        for (index, element) in elements.iter().enumerate() {
            conform(document, items, element, &format!("{at}/{index}"), problems);
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema["properties"].as_object();
        for required in strings(&schema["required"]) {
            if !object.contains_key(required) {
                problems.push(format!("{at}: required property {required} is missing"));
            }
        }
        for (key, field) in object {
            match properties.and_then(|properties| properties.get(key)) {
                Some(property) => conform(document, property, field, &format!("{at}/{key}"), problems),
                None if schema["additionalProperties"] == false => {
                    problems.push(format!("{at}: property {key} is not allowed"));
                }
                None => {}
            }
        }
    }
}

/// Asserts `reply`'s body conforms to what `operation` documents for its status.
fn assert_conforms(document: &Value, operation: &Value, reply: &Reply) {
    let status = reply.status.to_string();
    assert!(statuses(operation).contains(&status.as_str()), "status {status} is not documented: {}", reply.text);
    let schema = response_schema(document, operation, &status);
    let mut problems = Vec::new();
    conform(document, schema, &reply.body, "", &mut problems);
    assert!(problems.is_empty(), "{status} body does not conform: {problems:#?}\n{}", reply.text);
    assert!(
        reply.header("x-request-id").is_some_and(is_request_id),
        "documented X-Request-Id header missing or malformed: {:?}",
        reply.header("x-request-id")
    );
}

fn sorted_keys(value: &Value) -> BTreeSet<&str> {
    value.as_object().expect("a JSON object").keys().map(String::as_str).collect()
}

// ---------------------------------------------------------------- one document

#[tokio::test]
async fn served_document_equals_the_committed_copy_and_the_code() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;

    let reply = app.send(app.http.get(app.url("/v1/openapi.json"))).await;

    assert_eq!(reply.status, 200, "GET /v1/openapi.json needs no key: {}", reply.text);
    assert!(
        reply.header("content-type").is_some_and(|kind| kind.starts_with("application/json")),
        "content type {:?}",
        reply.header("content-type")
    );
    let served = &reply.body;
    let generated = document();
    let committed = committed_document();
    assert!(
        served == &generated,
        "the served document differs from the code's at {:?}",
        first_difference(served, &generated, "")
    );
    assert!(
        committed == generated,
        "schema/openapi.json differs from the code's document at {:?}; {REGENERATE}",
        first_difference(&committed, &generated, "")
    );
}

#[test]
fn document_is_openapi_3_1_at_version_1_0_0() {
    let document = document();

    // 3.1: its schemas are JSON Schema, which can say "a Money or null" (3.0 cannot), and
    // `info.summary` is one of its fields.
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["info"]["version"], "1.0.0");
    assert!(document["info"]["summary"].is_string(), "{}", document["info"]);
}

/// Every place in `value` where an object has `keyword`, as JSON pointers.
fn places_with(value: &Value, keyword: &str, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            if object.contains_key(keyword) {
                found.push(at.to_owned());
            }
            for (key, inner) in object {
                places_with(inner, keyword, &format!("{at}/{key}"), found);
            }
        }
        Value::Array(values) => {
            for (index, inner) in values.iter().enumerate() {
                places_with(inner, keyword, &format!("{at}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn no_schema_uses_the_3_0_keywords_nullable_and_example_or_wraps_a_reference_in_all_of() {
    let document = document();

    // `nullable` means nothing in 3.1 (null would be refused), `example` is deprecated
    // there, and `allOf: [$ref, {description}]` makes generators drop the schema.
    for keyword in ["nullable", "example", "allOf"] {
        let mut found = Vec::new();
        places_with(&document, keyword, "", &mut found);
        assert!(found.is_empty(), "`{keyword}` at {found:?}");
    }
}

#[test]
fn every_body_is_declared_as_application_json_without_parameters() {
    let document = document();

    for (path, item) in document["paths"].as_object().expect("paths") {
        let operation = &item["get"];
        for status in statuses(operation) {
            let kinds: Vec<&str> = operation["responses"][status]["content"]
                .as_object()
                .map(|content| content.keys().map(String::as_str).collect())
                .unwrap_or_default();
            assert_eq!(kinds, [JSON], "{path} {status}");
        }
    }
}

#[test]
fn document_leaves_servers_out_rather_than_listing_none() {
    let document = document();

    // Absent means "where the document was fetched from"; `[]` sends tools looking.
    assert!(document.get("servers").is_none(), "servers: {}", document["servers"]);
}

#[test]
fn workspace_api_key_is_an_api_key_in_the_x_api_key_header_required_by_both_operations() {
    let document = document();

    let scheme = &document["components"]["securitySchemes"]["WorkspaceApiKey"];
    assert_eq!(scheme["type"], "apiKey");
    assert_eq!(scheme["in"], "header");
    assert_eq!(scheme["name"], "X-API-Key");
    for operation in [list_contacts(&document), get_contact(&document)] {
        assert_eq!(operation["security"], json!([{ "WorkspaceApiKey": [] }]), "{}", operation["operationId"]);
    }
}

#[test]
fn operations_are_the_contacts_and_items_operations() {
    let document = document();

    assert_eq!(list_contacts(&document)["operationId"], "listContacts");
    assert_eq!(get_contact(&document)["operationId"], "getContact");
    assert_eq!(document["paths"]["/v1/items"]["get"]["operationId"], "listItems");
    assert_eq!(document["paths"]["/v1/items/{id}"]["get"]["operationId"], "getItem");
    assert_eq!(document["paths"]["/v1/contacts/changes"]["get"]["operationId"], "listContactChanges");
    assert_eq!(document["paths"]["/v1/items/changes"]["get"]["operationId"], "listItemChanges");
    let paths: BTreeSet<&str> = document["paths"].as_object().expect("paths").keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        BTreeSet::from([
            "/v1/contacts",
            "/v1/contacts/changes",
            "/v1/contacts/{id}",
            "/v1/items",
            "/v1/items/changes",
            "/v1/items/{id}"
        ])
    );
    for path in ["/v1/items", "/v1/items/{id}", "/v1/contacts/changes", "/v1/items/changes"] {
        let operation = &document["paths"][path]["get"];
        assert_eq!(operation["security"], json!([{ "WorkspaceApiKey": [] }]), "{path}");
    }
}

#[test]
fn list_contacts_documents_exactly_its_statuses_each_error_with_the_error_schema() {
    let document = document();
    let operation = list_contacts(&document);

    assert_eq!(statuses(operation), ["200", "400", "401", "403", "414", "429", "431", "500", "503"]);
    assert_eq!(operation["responses"]["200"]["content"].as_object().map(|c| c.len()), Some(1));
    for status in ["400", "401", "403", "414", "429", "431", "500", "503"] {
        let body = operation["responses"][status]["content"].as_object().expect("content");
        for (_, media) in body {
            assert_eq!(media["schema"]["$ref"], "#/components/schemas/ErrorResponse", "listContacts {status}");
        }
    }
}

#[test]
fn get_contact_documents_exactly_its_statuses_each_error_with_the_error_schema() {
    let document = document();
    let operation = get_contact(&document);

    assert_eq!(statuses(operation), ["200", "400", "401", "403", "404", "414", "429", "431", "500", "503"]);
    for status in ["400", "401", "403", "404", "414", "429", "431", "500", "503"] {
        let body = operation["responses"][status]["content"].as_object().expect("content");
        for (_, media) in body {
            assert_eq!(media["schema"]["$ref"], "#/components/schemas/ErrorResponse", "getContact {status}");
        }
    }
}

#[test]
fn every_response_declares_the_x_request_id_header_and_429_503_retry_after() {
    let document = document();

    for operation in [list_contacts(&document), get_contact(&document)] {
        for status in statuses(operation) {
            let headers = &operation["responses"][status]["headers"];
            let request_id = &headers["X-Request-Id"];
            assert_eq!(request_id["schema"]["$ref"], "#/components/schemas/RequestId", "{status}: {headers}");
            assert_eq!(request_id["required"], true, "{status}");
            if status == "429" || status == "503" {
                assert!(headers["Retry-After"].is_object(), "{status} does not declare Retry-After");
            }
        }
    }
}

// ---------------------------------------------------------------- parameters

#[test]
fn list_contacts_documents_exactly_the_contract_query_parameters() {
    let document = document();
    let operation = list_contacts(&document);

    let names: BTreeSet<&str> =
        query_parameters(operation).iter().filter_map(|parameter| parameter["name"].as_str()).collect();
    assert_eq!(names, BTreeSet::from(["search", "cursor", "limit", "type", "sort"]));
    for parameter in query_parameters(operation) {
        assert_ne!(parameter["required"], true, "{} must be optional", parameter["name"]);
    }
    let search = &parameter(operation, "search")["schema"];
    assert_eq!((&search["type"], &search["maxLength"]), (&json!("string"), &json!(120)));
    let cursor = &parameter(operation, "cursor")["schema"];
    assert_eq!((&cursor["type"], &cursor["minLength"]), (&json!("string"), &json!(1)));
    let limit = &parameter(operation, "limit")["schema"];
    assert_eq!(limit["type"], "integer");
    assert_eq!(number(&limit["minimum"]), Some(1.0));
    assert_eq!(number(&limit["maximum"]), Some(100.0));
    assert_eq!(limit["default"], 50);
    let kind = &parameter(operation, "type")["schema"];
    assert_eq!(strings(&kind["enum"]), ["all", "customer", "supplier"]);
    assert_eq!(kind["default"], "all");
    let sort = &parameter(operation, "sort")["schema"];
    assert_eq!(strings(&sort["enum"]), ["createdAt", "name"]);
    assert_eq!(sort["default"], "createdAt");
}

#[test]
fn get_contact_takes_a_uuid_id_in_the_path_and_no_query_parameters() {
    let document = document();
    let operation = get_contact(&document);

    assert!(query_parameters(operation).is_empty(), "{}", operation["parameters"]);
    let parameters = operation["parameters"].as_array().expect("parameters");
    assert_eq!(parameters.len(), 1, "{parameters:?}");
    assert_eq!((&parameters[0]["in"], &parameters[0]["name"]), (&json!("path"), &json!("id")));
    assert_eq!(parameters[0]["required"], true);
    assert_eq!(parameters[0]["schema"]["format"], "uuid");
}

#[test]
fn every_parameter_but_the_cursor_has_an_example_its_own_schema_accepts() {
    let document = document();

    // A cursor is only ever one the API issued: any example would be refused.
    for operation in [list_contacts(&document), get_contact(&document), list_items(&document), get_item(&document)] {
        for parameter in operation["parameters"].as_array().expect("parameters") {
            let name = parameter["name"].as_str().expect("name");
            let examples = parameter["schema"]["examples"].as_array().map(Vec::as_slice).unwrap_or_default();
            if name == "cursor" {
                assert!(examples.is_empty(), "cursor examples: {examples:?}");
                continue;
            }
            assert!(!examples.is_empty(), "{} {name} has no example", operation["operationId"]);
            for example in examples {
                let mut problems = Vec::new();
                conform(&document, &parameter["schema"], example, name, &mut problems);
                assert!(problems.is_empty(), "{} {name}: {problems:?}", operation["operationId"]);
                assert_ne!(Some(example), parameter["schema"].get("default"), "{name}: an example that is the default");
            }
        }
    }
}

#[test]
fn strict_query_allow_lists_equal_the_documented_query_parameters() {
    let document = document();
    let names = |operation: &Value| -> BTreeSet<String> {
        query_parameters(operation).iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect()
    };
    let allowed = |parameters: &AllowList| -> BTreeSet<String> {
        parameters.iter().map(|(name, _)| (*name).to_owned()).collect()
    };

    assert_eq!(allowed(<ListContactsQuery as QueryContract>::PARAMETERS), names(list_contacts(&document)));
    assert_eq!(allowed(<NoQuery as QueryContract>::PARAMETERS), names(get_contact(&document)));
    assert_eq!(allowed(<ListItemsQuery as QueryContract>::PARAMETERS), names(list_items(&document)));
    assert_eq!(allowed(<NoQuery as QueryContract>::PARAMETERS), names(get_item(&document)));
}

// ---------------------------------------------------------------- schemas

#[test]
fn contact_schema_has_exactly_the_nine_required_fields_with_their_formats() {
    let document = document();
    let contact = schema(&document, "Contact");
    let properties = &contact["properties"];

    assert_closed_with_exactly_required(contact, &CONTACT_FIELDS);
    for field in CONTACT_FIELDS {
        let nullable = ["email", "phone", "address", "tin"].contains(&field);
        let expected = if nullable { json!(["string", "null"]) } else { json!("string") };
        if !field.starts_with("is") {
            assert_eq!(properties[field]["type"], expected, "{field}: nullable should be {nullable}");
        }
    }
    assert_eq!(properties["isCustomer"]["type"], "boolean");
    assert_eq!(properties["isSupplier"]["type"], "boolean");
    assert_eq!(properties["name"]["minLength"], 1);
    assert_eq!(properties["id"]["format"], "uuid");
    assert_eq!(properties["email"]["format"], "email");
    let created_at = &properties["createdAt"];
    assert_eq!(created_at["format"], "date-time");
    let pattern = created_at["pattern"].as_str().expect("createdAt has a pattern");
    assert!(pattern.ends_with("\\.[0-9]{3}Z$") && pattern.starts_with('^'), "createdAt pattern {pattern}");
}

#[test]
fn page_schema_requires_has_more_and_a_nullable_non_empty_next_cursor() {
    let document = document();
    let page = schema(&document, "Page");

    assert_closed_with_exactly_required(page, &["hasMore", "nextCursor"]);
    assert_eq!(page["properties"]["hasMore"]["type"], "boolean");
    let next = &page["properties"]["nextCursor"];
    assert_eq!((&next["type"], &next["minLength"]), (&json!(["string", "null"]), &json!(1)));
}

#[test]
fn request_id_schema_has_the_contract_pattern_and_bounds() {
    let document = document();
    let request_id = schema(&document, "RequestId");

    assert_eq!(request_id["type"], "string");
    assert_eq!(request_id["pattern"], "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$");
    assert_eq!((&request_id["minLength"], &request_id["maxLength"]), (&json!(1), &json!(128)));
}

#[test]
fn error_schema_has_all_thirteen_codes_a_non_empty_message_and_optional_details() {
    let document = document();
    let response = schema(&document, "ErrorResponse");
    let info = resolve(&document, &response["properties"]["error"]);

    assert_eq!(property_names(response), BTreeSet::from(["error", "requestId"]));
    assert_eq!(required_names(response), BTreeSet::from(["error", "requestId"]));
    assert_eq!(response["additionalProperties"], false);
    assert_eq!(response["properties"]["requestId"]["$ref"], "#/components/schemas/RequestId");
    assert_eq!(property_names(info), BTreeSet::from(["code", "message", "details"]));
    assert_eq!(required_names(info), BTreeSet::from(["code", "message"]));
    assert_eq!(info["additionalProperties"], false);
    let code = resolve(&document, &info["properties"]["code"]);
    assert_eq!(code["type"], "string");
    let codes: BTreeSet<&str> = strings(&code["enum"]).into_iter().collect();
    assert_eq!(codes, BTreeSet::from(ERROR_CODES));
    assert_eq!(info["properties"]["message"]["minLength"], 1);
    // The description allows an array of strings or an object: the problems, or, for a
    // sync token the feed cannot continue from, an object whose constants a client tests.
    let details = resolve(&document, &info["properties"]["details"]);
    assert_eq!(
        details["oneOf"],
        json!([{ "type": "array", "items": { "type": "string" } }, { "$ref": "#/components/schemas/RefusedSyncToken" }]),
        "{details}"
    );
    let refused = schema(&document, "RefusedSyncToken");
    assert_eq!(required_names(refused), BTreeSet::from(["parameter", "problem", "startOver"]));
    assert_eq!(refused["properties"]["parameter"]["const"], "since");
    assert_eq!(refused["properties"]["startOver"]["const"], true);
}

#[test]
fn item_schema_has_exactly_the_nine_required_fields_prices_a_nullable_money() {
    let document = document();
    let item = schema(&document, "Item");
    let properties = &item["properties"];

    assert_closed_with_exactly_required(item, &ITEM_FIELDS);
    for field in ITEM_FIELDS {
        let nullable = ["sku", "description", "unit", "salePrice", "purchasePrice"].contains(&field);
        assert_eq!(allows_null(&document, &properties[field]), nullable, "{field}: nullable should be {nullable}");
    }
    for field in ["sku", "description", "unit"] {
        assert_eq!(properties[field]["type"], json!(["string", "null"]), "{field}");
    }
    for field in ["salePrice", "purchasePrice"] {
        // A Money or null, said the JSON Schema way, not with a reference's siblings.
        assert_eq!(
            properties[field]["anyOf"],
            json!([{ "$ref": "#/components/schemas/Money" }, { "type": "null" }]),
            "{field}: {}",
            properties[field]
        );
    }
    assert_eq!(properties["type"]["$ref"], "#/components/schemas/ItemType");
    assert_eq!(strings(&schema(&document, "ItemType")["enum"]), ["product", "service"]);
    assert_eq!((&properties["id"]["format"], &properties["name"]["minLength"]), (&json!("uuid"), &json!(1)));
    assert_eq!(properties["createdAt"]["pattern"], schema(&document, "Contact")["properties"]["createdAt"]["pattern"]);
    let money = schema(&document, "Money");
    assert_eq!(required_names(money), BTreeSet::from(["amount", "currency"]));
    assert_eq!(money["additionalProperties"], false);
    assert_eq!(money["properties"]["amount"]["pattern"], r"^-?[0-9]+(\.[0-9]+)?$");
    assert_eq!(money["properties"]["currency"]["pattern"], "^[A-Z]{3}$");
}

#[test]
fn every_object_schema_is_closed_and_requires_all_but_the_optional_details() {
    let document = document();

    for (name, schema) in document["components"]["schemas"].as_object().expect("schemas") {
        if schema["type"] != "object" {
            continue;
        }
        assert_eq!(schema["additionalProperties"], false, "{name} is not closed");
        let mut expected = property_names(schema);
        if name == "ErrorInfo" {
            expected.remove("details");
        }
        assert_eq!(required_names(schema), expected, "{name}: required");
    }
}

// ---------------------------------------------------------------- real bodies

#[tokio::test]
async fn served_listing_and_contact_bodies_conform_to_the_document() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    let full = ContactSeed::named("Acme GmbH")
        .email("billing@acme.example")
        .phone("+49 30 123456")
        .address("Hauptstr. 1, Berlin")
        .tin("DE123456789")
        .roles(true, true)
        .at(1);
    let full_id = full.insert(&app.pool, workspace).await;
    ContactSeed::named("Bare").roles(false, true).at(2).insert(&app.pool, workspace).await;
    let document = document();
    let contact_fields = property_names(schema(&document, "Contact"));

    let first = app.get(&key, "/v1/contacts?limit=1").await;
    let second = app.get(&key, "/v1/contacts?limit=5").await;
    let one = app.get(&key, &format!("/v1/contacts/{full_id}")).await;

    first.assert_ok();
    assert_eq!(first.body["page"]["hasMore"], true, "{}", first.text);
    second.assert_ok();
    assert_eq!(second.data().len(), 2, "{}", second.text);
    assert!(second.data()[1]["email"].is_null(), "{}", second.text);
    for reply in [&first, &second] {
        assert_conforms(&document, list_contacts(&document), reply);
        for contact in reply.data() {
            assert_eq!(sorted_keys(contact), contact_fields, "{contact}");
        }
    }
    one.assert_ok();
    assert_conforms(&document, get_contact(&document), &one);
    assert_eq!(sorted_keys(&one.body["data"]), contact_fields);
}

/// The rule: a feed page conforms to the document, each entry to exactly one side of the
/// union discriminated by `change`: an upserted entry with its record, a removed one with
/// null.
#[tokio::test]
async fn served_feed_pages_with_upserted_and_removed_entries_conform_to_the_document() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (workspace, key) = app.workspace_with_key().await;
    ContactSeed::named("Active").at(1).insert(&app.pool, workspace).await;
    ContactSeed::named("Archived").status("archived").at(2).insert(&app.pool, workspace).await;
    let document = document();

    let page = app.get(&key, "/v1/contacts/changes").await;

    page.assert_ok();
    let changes: BTreeSet<&str> = page.data().iter().filter_map(|entry| entry["change"].as_str()).collect();
    assert_eq!(changes, BTreeSet::from(["removed", "upserted"]), "{}", page.text);
    assert_conforms(&document, operation(&document, "/v1/contacts/changes"), &page);
    let mut problems = Vec::new();
    let removed_as_upserted = json!({ "id": Uuid::new_v4(), "change": "upserted", "record": null });
    conform(
        &document,
        &json!({ "$ref": "#/components/schemas/ContactChange" }),
        &removed_as_upserted,
        "",
        &mut problems,
    );
    assert!(!problems.is_empty(), "the document accepts an upserted entry without its record");
}

#[tokio::test]
async fn served_item_bodies_with_null_and_filled_prices_conform_to_the_document() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let workspace = Uuid::new_v4();
    let key = app.key(workspace, &[lectern_api::keys::Scope::ItemsRead]).await;
    let priced = ItemSeed::named("Consulting hour")
        .kind("service")
        .sku("CONS-1")
        .unit("hour")
        .sale_price("-12345678901234.5678", "JPY")
        .purchase_price("0.10", "EUR")
        .at(1);
    let priced_id = priced.insert(&app.pool, workspace).await;
    let bare_id = ItemSeed::named("Widget").at(2).insert(&app.pool, workspace).await;
    let document = document();

    let page = app.get(&key, "/v1/items?limit=5").await;
    let bare = app.get(&key, &format!("/v1/items/{bare_id}")).await;
    let filled = app.get(&key, &format!("/v1/items/{priced_id}")).await;

    page.assert_ok();
    assert_eq!(page.data().len(), 2, "{}", page.text);
    assert_conforms(&document, list_items(&document), &page);
    bare.assert_ok();
    assert!(bare.body["data"]["salePrice"].is_null() && bare.body["data"]["purchasePrice"].is_null(), "{}", bare.text);
    assert_conforms(&document, get_item(&document), &bare);
    filled.assert_ok();
    assert_eq!(filled.body["data"]["salePrice"], json!({ "amount": "-12345678901234.5678", "currency": "JPY" }));
    assert_conforms(&document, get_item(&document), &filled);
}

#[tokio::test]
async fn served_error_bodies_conform_to_the_error_schema() {
    let db = TestDatabase::create().await;
    let app = TestApp::spawn(db.pool.clone()).await;
    let (_, key) = app.workspace_with_key().await;
    let items_only = app.key(Uuid::new_v4(), &[lectern_api::keys::Scope::ItemsRead]).await;
    let document = document();
    let error_fields = property_names(schema(&document, "ErrorResponse"));

    let invalid = app.get(&key, "/v1/contacts?limit=0&colour=blue").await;
    let unauthorized = app.get("lk_live_nope", "/v1/contacts").await;
    let forbidden = app.get(&items_only, "/v1/contacts").await;
    let missing = app.get(&key, &format!("/v1/contacts/{}", Uuid::new_v4())).await;

    invalid.assert_error(400, "VALIDATION_ERROR");
    unauthorized.assert_error(401, "UNAUTHORIZED");
    forbidden.assert_error(403, "FORBIDDEN");
    missing.assert_error(404, "NOT_FOUND");
    for reply in [&invalid, &unauthorized, &forbidden] {
        assert_conforms(&document, list_contacts(&document), reply);
        assert_eq!(sorted_keys(&reply.body), error_fields);
    }
    assert_conforms(&document, get_contact(&document), &missing);
    assert_eq!(sorted_keys(&missing.body), error_fields);
    assert_eq!(invalid.details().len(), 2, "{}", invalid.text);
}

#[test]
fn the_feed_operations_document_since_limit_wait_and_every_field_of_a_change() {
    let document = document();
    for (path, record) in [("/v1/contacts/changes", "Contact"), ("/v1/items/changes", "Item")] {
        let operation = operation(&document, path);
        assert_eq!(statuses(operation), ["200", "400", "401", "403", "414", "429", "431", "500", "503"], "{path}");
        let names: BTreeSet<&str> =
            query_parameters(operation).iter().map(|parameter| parameter["name"].as_str().expect("a name")).collect();
        assert_eq!(names, BTreeSet::from(["limit", "since", "wait"]), "{path}");
        let bounds = |name: &str| {
            let schema = &parameter(operation, name)["schema"];
            [&schema["minimum"], &schema["maximum"], &schema["default"]].map(Value::as_f64)
        };
        assert_eq!(bounds("limit"), [Some(1.0), Some(100.0), Some(100.0)], "{path}");
        assert_eq!(bounds("wait"), [Some(0.0), Some(30.0), Some(0.0)], "{path}");
        assert_eq!(parameter(operation, "since")["required"], false, "{path}");

        let page = response_schema(&document, operation, "200");
        assert_eq!(property_names(page), BTreeSet::from(["data", "hasMore", "requestId", "syncToken"]), "{path}");
        assert_eq!(page["additionalProperties"], false);
        let change_name = page["properties"]["data"]["items"]["$ref"]
            .as_str()
            .and_then(|reference| reference.rsplit('/').next())
            .expect("data items are a named schema");
        // A union discriminated by `change`: an upserted entry always carries the record, a
        // removed one always null, so generated clients type `record` as the record (not
        // optional) once they know the entry is upserted.
        let change = &document["components"]["schemas"][change_name];
        let (upserted, removed) = (format!("{record}Upserted"), format!("{record}Removed"));
        let reference = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
        assert_eq!(change["oneOf"], json!([reference(&upserted), reference(&removed)]), "{path}");
        assert_eq!(change["discriminator"]["propertyName"], "change", "{path}");
        assert_eq!(change["discriminator"]["mapping"]["upserted"], reference(&upserted)["$ref"], "{path}");
        assert_eq!(change["discriminator"]["mapping"]["removed"], reference(&removed)["$ref"], "{path}");
        for (variant, kind, record_schema) in
            [(&upserted, "upserted", reference(record)), (&removed, "removed", json!({ "type": "null" }))]
        {
            let variant = schema(&document, variant);
            assert_closed_with_exactly_required(variant, &["change", "id", "record"]);
            assert_eq!(variant["properties"]["change"]["const"], kind, "{path}");
            assert_eq!(variant["properties"]["record"], record_schema, "{path}");
        }
    }
}

/// The rule: the document says what integrators otherwise learn by surprise: sync tokens
/// never expire, cursors do, and a refused token means starting over, which its
/// `RefusedSyncToken` details say in a form code can test.
#[test]
fn the_document_says_tokens_never_expire_cursors_do_and_a_refused_token_means_starting_over() {
    let document = document();
    let mut described = BTreeMap::<String, Vec<String>>::new();
    for operation in document["paths"].as_object().expect("paths").values().flat_map(|item| item.as_object()) {
        for parameter in operation.values().flat_map(|op| op["parameters"].as_array().cloned().unwrap_or_default()) {
            let name = parameter["name"].as_str().unwrap_or_default().to_owned();
            let text = parameter["schema"]["description"].as_str().unwrap_or_default().to_owned();
            described.entry(name).or_default().push(text);
        }
    }
    let since = &described["since"];
    assert_eq!(since.len(), 2, "both feeds take since: {since:?}");
    for text in since {
        assert!(text.contains("never expire"), "since: {text}");
        assert!(text.contains("RefusedSyncToken") && text.contains("startOver"), "since: {text}");
    }
    for text in &described["cursor"] {
        assert!(text.contains("expire"), "cursor: {text}");
    }
    for page in ["ContactChanges", "ItemChanges"] {
        let token = &schema(&document, page)["properties"]["syncToken"]["description"];
        assert!(token.as_str().is_some_and(|text| text.contains("never expire")), "{page}.syncToken: {token}");
    }
}

/// The rules: every success says what it carries (no empty description), and a page's
/// `nextCursor` is tied to its `hasMore`: a string when more follow, null on the last page.
#[test]
fn every_success_is_described_and_a_page_ties_next_cursor_to_has_more() {
    let document = document();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let description = operation["responses"]["200"]["description"].as_str().unwrap_or_default();
            assert!(!description.trim().is_empty(), "{method} {path}: a 200 without a description");
        }
    }
    let page = schema(&document, "Page");
    assert_eq!(page["if"], json!({ "properties": { "hasMore": { "const": true } } }));
    assert_eq!(page["then"]["properties"]["nextCursor"]["type"], "string");
    assert_eq!(page["else"]["properties"]["nextCursor"]["type"], "null");
}

/// The rule: every success shows an example of what it carries, the example conforms to
/// the document, and each feed's shows both kinds of entry, a removal included.
#[test]
fn every_success_has_an_example_that_conforms_and_the_feeds_show_a_removal() {
    let document = document();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let media = &operation["responses"]["200"]["content"]["application/json"];
            let example = &media["examples"]["success"]["value"];
            assert!(example.is_object(), "{method} {path}: no example of its 200");
            let mut problems = Vec::new();
            conform(&document, &media["schema"], example, "", &mut problems);
            assert!(problems.is_empty(), "{method} {path}: the example does not conform: {problems:?}");
            if path.ends_with("/changes") {
                let changes: BTreeSet<&str> =
                    example["data"].as_array().into_iter().flatten().filter_map(|e| e["change"].as_str()).collect();
                assert_eq!(changes, BTreeSet::from(["removed", "upserted"]), "{path}");
            }
        }
    }
}
