//! Rate limits: a GCRA token bucket per API key (the contract's 429), and one per
//! client address for key lookups that fail (an unknown key id or a wrong secret), so
//! a flood of made-up keys costs PostgreSQL at most a trickle of queries. A lookup of a
//! real key is never charged: many integrations behind one proxy share its address.
//!
//! Buckets live in this process: with several replicas a key's effective limit is
//! the per-replica limit times the replicas its requests spread over (docs/operations.md).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    failed_lookups_per_address: Keyed<IpAddr>,
    /// Addresses whose failed lookups emptied their bucket, until when: lookups of
    /// keys not yet verified from there are refused meanwhile, without a query.
    refusing_lookups: Mutex<HashMap<IpAddr, Instant>>,
    /// How long an empty lookup bucket takes to hold one more lookup.
    lookup_refill: Duration,
    clock: DefaultClock,
}

/// The address a client's lookups count under: IPv4 by address, IPv6 by its /64, the
/// block one host is usually given (rotating addresses within it must not escape).
fn lookup_bucket(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

impl RateLimits {
    pub fn new(per_key: Policy, lookups_per_address: Policy) -> Self {
        Self {
            per_key: RateLimiter::keyed(per_key.quota()).with_middleware::<StateInformationMiddleware>(),
            per_key_policy: per_key,
            failed_lookups_per_address: RateLimiter::keyed(lookups_per_address.quota())
                .with_middleware::<StateInformationMiddleware>(),
            refusing_lookups: Mutex::default(),
            lookup_refill: Duration::from_secs(60) / lookups_per_address.per_minute.get(),
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

    /// `Err` with the seconds to wait while `address` may not look up keys it has not
    /// verified before (its failed lookups emptied its bucket).
    pub fn check_lookup(&self, address: IpAddr) -> Result<(), u64> {
        let refusing = self.lock_refusing();
        match refusing.get(&lookup_bucket(address)) {
            Some(until) if *until > Instant::now() => Err(ceil_secs(*until - Instant::now()).max(1)),
            _ => Ok(()),
        }
    }

    /// Counts a lookup from `address` that found no key or a wrong secret; the one that
    /// empties the address's bucket starts its refusal.
    pub fn count_failed_lookup(&self, address: IpAddr) {
        let bucket = lookup_bucket(address);
        let refuse_for = match self.failed_lookups_per_address.check_key(&bucket) {
            Ok(snapshot) if snapshot.remaining_burst_capacity() > 0 => return,
            Ok(_) => self.lookup_refill,
            Err(not_until) => not_until.wait_time_from(self.clock.now()),
        };
        self.lock_refusing().insert(bucket, Instant::now() + refuse_for);
    }

    fn lock_refusing(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Instant>> {
        // Single inserts and removals: a poisoned lock still holds a consistent map.
        self.refusing_lookups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets callers whose buckets are full again, so memory follows active callers.
    pub fn forget_idle(&self) {
        self.per_key.retain_recent();
        self.failed_lookups_per_address.retain_recent();
        self.per_key.shrink_to_fit();
        self.failed_lookups_per_address.shrink_to_fit();
        let now = Instant::now();
        self.lock_refusing().retain(|_, until| *until > now);
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
    fn failed_lookups_are_limited_per_address_and_successful_ones_cost_nothing() {
        let limits = RateLimits::new(policy(60, 1), policy(60, 2));
        let flooder: IpAddr = [10, 0, 0, 1].into();
        assert!(limits.check_lookup(flooder).is_ok());
        limits.count_failed_lookup(flooder);
        assert!(limits.check_lookup(flooder).is_ok(), "one failure with a burst of two");
        limits.count_failed_lookup(flooder);
        assert!(limits.check_lookup(flooder).is_err(), "two failures with a burst of two");
        assert!(limits.check_lookup([10, 0, 0, 2].into()).is_ok(), "another address is not affected");
    }

    #[test]
    fn ipv6_lookups_count_per_64_block_and_mapped_ipv4_as_ipv4() {
        let limits = RateLimits::new(policy(60, 1), policy(60, 1));
        let first: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let rotated: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:fffe".parse().unwrap();
        let neighbour: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        limits.count_failed_lookup(first);
        assert!(limits.check_lookup(rotated).is_err(), "an address in the same /64 escaped the bucket");
        assert!(limits.check_lookup(neighbour).is_ok(), "the next /64 is another client");

        let mapped: IpAddr = "::ffff:10.0.0.9".parse().unwrap();
        limits.count_failed_lookup(mapped);
        assert!(limits.check_lookup([10, 0, 0, 9].into()).is_err(), "a mapped IPv4 address is that IPv4 address");
    }
}
