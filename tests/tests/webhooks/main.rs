//! Webhooks end to end: `lectern-api webhooks …` registers an endpoint, the API (in
//! process, or real `serve` processes) delivers to receivers on loopback, and every
//! delivery is verified with the official Standard Webhooks library.

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod agreement;
mod announced;
mod cli;
mod clock;
mod coalescing;
mod delivery;
mod endpoints;
mod fairness;
mod feed_copy;
mod pepper_rotation;
mod processes;
mod retries;
mod senders;
mod targets;
mod writes;
