//! When deliveries arrived and what the delivery log says of their times.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lectern_tests::webhooks::Delivery;
use serde_json::Value;

/// When an arrival happened, on the clock PostgreSQL's timestamps use (the same machine's).
pub fn wall_clock(at: Instant) -> DateTime<Utc> {
    let elapsed = chrono::Duration::from_std(at.elapsed()).unwrap_or_else(|_| chrono::Duration::zero());
    Utc::now() - elapsed
}

/// A timestamp of the delivery log.
pub fn timestamp(entry: &Value, field: &str) -> DateTime<Utc> {
    entry[field]
        .as_str()
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .unwrap_or_else(|| panic!("no {field} timestamp in {entry}"))
        .with_timezone(&Utc)
}

/// The time between consecutive arrivals.
pub fn gaps(deliveries: &[Delivery]) -> Vec<Duration> {
    deliveries.windows(2).map(|pair| pair[1].arrived.duration_since(pair[0].arrived)).collect()
}

/// The `q`-quantile of `samples` (sorted here), in milliseconds.
pub fn quantile_ms(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0
}
