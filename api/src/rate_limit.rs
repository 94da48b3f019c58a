//! Rate limits: a GCRA token bucket per API key (the contract's 429), and one per
//! client address for key lookups that reach the database, so a flood of made-up
//! keys costs PostgreSQL at most a trickle of queries.
//!
//! Buckets live in this process: with several replicas a key's effective limit is
//! the per-replica limit times the replicas its requests spread over (README).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>;

/// A bucket's shape: `burst` requests at once, refilled at `per_minute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub per_minute: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Policy {
    fn quota(self) -> Quota {
        Quota::per_minute(self.per_minute).allow_burst(self.burst)
    }

    /// Seconds a drained bucket takes to refill: the window the headers state.
    pub fn window_secs(self) -> u64 {
        (u64::from(self.burst.get()) * 60).div_ceil(u64::from(self.per_minute.get())).max(1)
    }

    /// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): the burst as the
    /// quota, over the time it takes to refill.
    pub fn header(self) -> String {
        format!("\"per-key\";q={};w={}", self.burst, self.window_secs())
    }
}

/// Where a caller stands after a request was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub policy: Policy,
    /// Requests that could be sent at once now.
    pub remaining: u32,
    /// Seconds until the bucket is full again.
    pub reset_secs: u64,
    /// For a refused request: seconds until one more is allowed.
    pub retry_after_secs: Option<u64>,
}

impl Standing {
    /// `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    pub fn header(&self) -> String {
        format!("\"per-key\";r={};t={}", self.remaining, self.reset_secs)
    }
}

/// Every limit the API enforces.
pub struct RateLimits {
    per_key: Keyed<String>,
    per_key_policy: Policy,
    lookups_per_address: Keyed<IpAddr>,
    clock: DefaultClock,
}

impl RateLimits {
    pub fn new(per_key: Policy, lookups_per_address: Policy) -> Self {
        Self {
            per_key: RateLimiter::keyed(per_key.quota()).with_middleware::<StateInformationMiddleware>(),
            per_key_policy: per_key,
            lookups_per_address: RateLimiter::keyed(lookups_per_address.quota())
                .with_middleware::<StateInformationMiddleware>(),
            clock: DefaultClock::default(),
        }
    }

    /// Counts one request of `key_id`; `retry_after_secs` is set when it is refused.
    pub fn check_key(&self, key_id: &str) -> Standing {
        let policy = self.per_key_policy;
        let refill_per_request = Duration::from_secs(60) / policy.per_minute.get();
        match self.per_key.check_key(&key_id.to_owned()) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                let missing = policy.burst.get().saturating_sub(remaining);
                Standing {
                    policy,
                    remaining,
                    reset_secs: ceil_secs(refill_per_request * missing),
                    retry_after_secs: None,
                }
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Standing {
                    policy,
                    remaining: 0,
                    reset_secs: ceil_secs(refill_per_request * policy.burst.get()),
                    retry_after_secs: Some(ceil_secs(wait).max(1)),
                }
            }
        }
    }

    /// Counts one database lookup of an uncached key from `address`; `Err` holds the
    /// seconds until another is allowed.
    pub fn check_lookup(&self, address: IpAddr) -> Result<(), u64> {
        self.lookups_per_address
            .check_key(&address)
            .map(|_| ())
            .map_err(|not_until| ceil_secs(not_until.wait_time_from(self.clock.now())).max(1))
    }

    /// Forgets callers whose buckets are full again, so memory follows active callers.
    pub fn forget_idle(&self) {
        self.per_key.retain_recent();
        self.lookups_per_address.retain_recent();
        self.per_key.shrink_to_fit();
        self.lookups_per_address.shrink_to_fit();
    }
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_millis().div_ceil(1000).try_into().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(per_minute: u32, burst: u32) -> Policy {
        Policy { per_minute: NonZeroU32::new(per_minute).unwrap(), burst: NonZeroU32::new(burst).unwrap() }
    }

    #[test]
    fn a_key_gets_its_burst_then_is_refused_with_a_retry_after() {
        let limits = RateLimits::new(policy(60, 3), policy(60, 3));
        let standings: Vec<Standing> = (0..4).map(|_| limits.check_key("k1")).collect();
        assert_eq!(standings.iter().map(|s| s.remaining).collect::<Vec<_>>(), [2, 1, 0, 0]);
        assert_eq!(standings[..3].iter().filter(|s| s.retry_after_secs.is_some()).count(), 0);
        assert_eq!(standings[3].retry_after_secs, Some(1));
    }

    #[test]
    fn one_keys_flood_leaves_another_keys_bucket_untouched() {
        let limits = RateLimits::new(policy(60, 2), policy(60, 2));
        for _ in 0..10 {
            limits.check_key("flooder");
        }
        assert_eq!(limits.check_key("quiet").remaining, 1);
    }

    #[test]
    fn the_policy_header_states_the_burst_over_its_refill_time() {
        assert_eq!(policy(600, 100).header(), "\"per-key\";q=100;w=10");
        assert_eq!(policy(60, 100).header(), "\"per-key\";q=100;w=100");
    }

    #[test]
    fn lookups_are_limited_per_address() {
        let limits = RateLimits::new(policy(60, 1), policy(60, 2));
        let flooder: IpAddr = [10, 0, 0, 1].into();
        assert!(limits.check_lookup(flooder).is_ok());
        assert!(limits.check_lookup(flooder).is_ok());
        assert!(limits.check_lookup(flooder).is_err());
        assert!(limits.check_lookup([10, 0, 0, 2].into()).is_ok());
    }
}
