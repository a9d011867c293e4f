//! Async tests of the agent: calls under R-retry on a paused clock, start from the cache,
//! Watch / Ack and Report against an in-process fake control plane, the counts of SPEC §8;
//! and the module graph of the crate.

mod call;
mod counts;
mod fake;
mod layers;
mod report;
mod server;
