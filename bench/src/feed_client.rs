//! A client of the contacts feed, as the feed's scenarios poll it.

use super::{Context, Result};

/// One page of the contacts feed, as a client reads it.
pub struct Page {
    pub ids: Vec<String>,
    pub has_more: bool,
    pub sync_token: String,
}

/// `GET /v1/contacts/changes?<query>` with `key`; an error unless a 200 with a token.
pub async fn poll(client: &reqwest::Client, base: &str, key: &str, query: &str) -> Result<Page> {
    let response = client
        .get(format!("{base}/v1/contacts/changes?{query}"))
        .header("X-API-Key", key)
        .send()
        .await
        .context("GET /v1/contacts/changes")?;
    if !response.status().is_success() {
        return Err(
            format!("the feed answered {}: {}", response.status(), response.text().await.unwrap_or_default()).into()
        );
    }
    let page: serde_json::Value = response.json().await.context("a page of the contacts feed")?;
    let ids = page["data"]
        .as_array()
        .map(|changes| changes.iter().filter_map(|change| change["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let sync_token = page["syncToken"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("a feed page without a syncToken: {page}"))?;
    Ok(Page { ids, has_more: page["hasMore"].as_bool().unwrap_or(false), sync_token })
}
