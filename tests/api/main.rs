//! budgetd's one integration-test binary (one binary keeps link time down on 2 cores).
//! Every scenario runs on SQLite, and on PostgreSQL when BUDGETD_TEST_DATABASE_URL is set.

mod helpers;

mod agent;
mod auth;
mod bad_input;
mod deploy;
mod examples;
mod export;
mod formats;
mod grpc;
mod idempotency;
mod lifecycle;
mod observe;
mod openapi;
mod processes;
mod releases;
mod replicas;
mod s3;
mod store_contract;
mod tls;
