//! One HTTP attempt of a delivery: POST, signed, no redirect followed, the response's
//! body never read, the whole attempt bounded by the settings' timeout.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use uuid::Uuid;

use super::secret::{signature_header, SigningSecret};
use super::target::{GuardedResolver, TargetPolicy};
use super::Resource;

/// The client every attempt of a process goes through.
pub fn client(policy: TargetPolicy, timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { policy }))
        // A redirect would take the delivery somewhere nobody registered (and past the
        // address checks); a 3xx is a failed attempt.
        .redirect(reqwest::redirect::Policy::none())
        // A proxy would resolve the name itself, past the address checks.
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .user_agent(concat!("Lectern-Webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// What a delivery says.
pub struct Announcement<'a> {
    pub id: &'a str,
    pub workspace_id: Uuid,
    pub resource: Resource,
    /// When the first change it announces was seen.
    pub since: DateTime<Utc>,
}

impl Announcement<'_> {
    /// The body: the type, when, and which workspace's feed to pull; no record.
    pub fn body(&self) -> Vec<u8> {
        let body = serde_json::json!({
            "type": self.resource.event_type(),
            "timestamp": self.since.to_rfc3339_opts(SecondsFormat::Millis, true),
            "data": { "workspaceId": self.workspace_id, "resource": self.resource.as_str() },
        });
        body.to_string().into_bytes()
    }
}

/// How an attempt ended.
#[derive(Debug)]
pub enum Outcome {
    /// 2xx.
    Delivered(u16),
    /// Any other status, 3xx included.
    Refused(u16),
    /// No status came back: the address was refused, the connection failed, or the
    /// timeout passed.
    Failed(String),
}

/// Sends one attempt of `announcement` to `url`, signed with each of `secrets`.
pub async fn send(
    client: &reqwest::Client,
    policy: TargetPolicy,
    url: &str,
    announcement: &Announcement<'_>,
    secrets: &[SigningSecret],
) -> Outcome {
    // The resolver checks names; an address written in the URL is checked here.
    let url = match policy.check_form(url) {
        Ok(url) => url,
        Err(refused) => return Outcome::Failed(refused.to_string()),
    };
    let body = announcement.body();
    let timestamp = Utc::now().timestamp();
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let signature = signature_header(secrets, announcement.id, timestamp, &body);
    for (name, value) in [
        ("webhook-id", announcement.id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature),
    ] {
        match HeaderValue::from_str(&value) {
            Ok(value) => {
                headers.insert(name, value);
            }
            Err(_) => return Outcome::Failed(format!("{name} is not a valid header value")),
        }
    }
    match client.post(url).headers(headers).body(body).send().await {
        // The body is never read: a receiver answering a huge one costs nothing.
        Ok(response) if response.status().is_success() => Outcome::Delivered(response.status().as_u16()),
        Ok(response) => Outcome::Refused(response.status().as_u16()),
        // Stored and shown to operators: the URL's path and query may hold a token.
        Err(error) => Outcome::Failed(lectern_runtime::with_causes(&error.without_url())),
    }
}
