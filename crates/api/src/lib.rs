//! The typed contract of budgetd's HTTP API (`/api/v1`): one request/response struct per
//! resource, serialised by the server's handlers and deserialised by `budgetctl`'s renderers.
//!
//! Field order is the order on the wire only where a type is written as is; the server writes
//! every answer with its keys sorted (as `serde_json::Value` does), so adding a field never
//! moves another. `schemas/openapi.json`'s component schemas are checked against these types
//! (`tests/api/openapi.rs`), and the `*Query` types (a route's query string) against its
//! documented query parameters (`budgetd`'s `http::api` tests).
//!
//! Deserialising an answer is lenient (`#[serde(default)]`): a client renders an older or
//! newer server's answer with the missing fields empty. A request's required fields are
//! required: the server reads its bodies into these types and refuses what does not fit.

pub mod agents;
pub mod archive;
pub mod audit;
pub mod baselines;
pub mod chains;
pub mod errors;
pub mod feedback;
pub mod releases;
pub mod runs;
pub mod tokens;
