//! Operations files, checked on paper (no container engine runs where the tests do):
//! compose.yaml against the real binaries' command lines, .env.example and the
//! Dockerfile; the Dockerfile against the workspace and compose.yaml; the Markdown
//! files' links against the repository.

#![expect(clippy::expect_used, reason = "in tests, a failed expectation is the test failing, with its message")]

mod alert_rules;
mod architecture_map;
mod cli;
mod compose;
mod database_functions;
mod dockerfile;
mod docs_commands;
mod docs_links;
mod layers;
mod stack;
mod standby;
