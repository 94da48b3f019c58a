//! An integration's copy of one feed, pulled over HTTP from any API (in process or a
//! `serve`), as a receiver pulls when a delivery tells it to.

use std::collections::BTreeMap;

use lectern_tests::app::{urlencode, Reply};
use serde_json::Value;

/// The records an integration holds by id, and its token.
pub struct FeedCopy {
    pub resource: &'static str,
    pub key: String,
    pub token: Option<String>,
    pub held: BTreeMap<String, Value>,
    http: reqwest::Client,
}

impl FeedCopy {
    pub fn new(resource: &'static str, key: &str) -> Self {
        Self { resource, key: key.to_owned(), token: None, held: BTreeMap::new(), http: reqwest::Client::new() }
    }

    async fn get(&self, base: &str, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{base}{path}"))
            .header("X-API-Key", &self.key)
            .send()
            .await
            .expect("the request reaches the API");
        let reply = Reply::read(response).await;
        reply.assert_ok();
        reply
    }

    /// Pulls the feed from its token until it has no more, applying each entry; `base`
    /// is the API's `http://host:port`.
    pub async fn pull(&mut self, base: &str) {
        loop {
            let path = match &self.token {
                Some(token) => format!("/v1/{}/changes?limit=100&since={}", self.resource, urlencode(token)),
                None => format!("/v1/{}/changes?limit=100", self.resource),
            };
            let reply = self.get(base, &path).await;
            for entry in reply.data() {
                let id = entry["id"].as_str().expect("an entry's id").to_owned();
                if entry["change"] == "upserted" {
                    self.held.insert(id, entry["record"].clone());
                } else {
                    self.held.remove(&id);
                }
            }
            self.token = reply.body["syncToken"].as_str().map(str::to_owned);
            if reply.body["hasMore"] != Value::Bool(true) {
                return;
            }
        }
    }

    /// The source: every active record of the listing, by id.
    pub async fn listing(&self, base: &str) -> BTreeMap<String, Value> {
        let mut records = BTreeMap::new();
        let mut path = format!("/v1/{}?limit=100", self.resource);
        loop {
            let reply = self.get(base, &path).await;
            for record in reply.data() {
                records.insert(record["id"].as_str().expect("a record's id").to_owned(), record.clone());
            }
            match reply.body["page"]["nextCursor"].as_str() {
                Some(cursor) => path = format!("/v1/{}?limit=100&cursor={}", self.resource, urlencode(cursor)),
                None => return records,
            }
        }
    }
}
