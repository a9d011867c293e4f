//! budgetd: the control plane for timeout budgets.
//!
//! The pure rules live in `budget-core`; this crate adds storage, the HTTP and gRPC APIs and
//! the `budgetd` binary (the package also builds `budgetctl`, whose code is the `budgetctl`
//! crate and links none of this one). See ARCHITECTURE.md for the map.
#![forbid(unsafe_code)]

pub mod app;
pub mod archive;
pub mod auth;
pub mod clock;
pub mod config;
pub mod error;
pub mod feedback;
pub mod fleet;
pub mod grpc;
pub mod http;
pub mod observe;
pub mod publish;
pub mod schemas;
pub mod service;
pub mod state;
pub mod store;
pub mod tls;

pub use app::App;
pub use config::Settings;
