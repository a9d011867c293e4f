//! Async tests of the agent: calls under R-retry on a paused clock, start from the cache, and
//! Watch / Ack against an in-process fake control plane; and the module graph of the crate.

mod call;
mod layers;
mod server;
