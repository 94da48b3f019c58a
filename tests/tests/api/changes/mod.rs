//! The changes feed (`listContactChanges`, `listItemChanges`), rule by rule as
//! `docs/api.md` ("The changes feed") states them.

mod held_back;
mod long_polls;
mod read_ahead;
mod rules;
mod skip_race;
mod tokens;

use lectern_tests::app::{urlencode, Reply, TestApp};
use serde_json::Value;

/// One feed response: its `(id, change)` pairs, in order.
fn changes(reply: &Reply) -> Vec<(String, String)> {
    reply.assert_ok();
    reply
        .data()
        .iter()
        .map(|entry| {
            (entry["id"].as_str().expect("id").to_owned(), entry["change"].as_str().expect("change").to_owned())
        })
        .collect()
}

fn token(reply: &Reply) -> String {
    reply.body["syncToken"].as_str().unwrap_or_else(|| panic!("no syncToken: {}", reply.text)).to_owned()
}

/// `path` (`/v1/contacts/changes`) with `since` and `extra` query parameters.
fn feed_url(path: &str, since: Option<&str>, extra: &str) -> String {
    let mut query: Vec<String> = Vec::new();
    if let Some(since) = since {
        query.push(format!("since={}", urlencode(since)));
    }
    if !extra.is_empty() {
        query.push(extra.to_owned());
    }
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// Follows the feed at `path` from `since` until `hasMore` is false: every entry of
/// every response in order, and the last token. Every change committed before the
/// call is in what it returns.
async fn follow(app: &TestApp, key: &str, path: &str, since: Option<&str>, limit: usize) -> (Vec<Value>, String) {
    app.heard_every_commit().await;
    let mut entries = Vec::new();
    let mut since = since.map(str::to_owned);
    for _ in 0..10_000 {
        let reply = app.get(key, &feed_url(path, since.as_deref(), &format!("limit={limit}"))).await;
        reply.assert_ok();
        assert!(reply.data().len() <= limit, "more entries than the limit: {}", reply.text);
        entries.extend(reply.data().iter().cloned());
        since = Some(token(&reply));
        if reply.body["hasMore"] == Value::Bool(false) {
            return (entries, token(&reply));
        }
    }
    panic!("the feed did not end");
}

/// The ids of `entries`, in order.
fn ids(entries: &[Value]) -> Vec<String> {
    entries.iter().map(|entry| entry["id"].as_str().expect("id").to_owned()).collect()
}
