//! budgetd's one integration-test binary (one binary keeps link time down on 2 cores).
//! Every scenario runs on SQLite, and on PostgreSQL when BUDGETD_TEST_DATABASE_URL is set.

mod helpers;

mod agent;
mod aliases;
mod auth;
mod bad_input;
mod bodies;
mod canary;
mod canary_health;
mod crash;
mod ctl_errors;
mod deploy;
mod drafts;
mod dry_run;
mod examples;
mod export;
mod feedback;
mod fleet;
mod formats;
mod fuzz;
mod grpc;
mod grpc_listener;
mod hardening;
mod header_flood;
mod idempotency;
mod keepalive;
mod kill_rate;
mod lifecycle;
mod limits;
mod multipart;
mod observe;
mod openapi;
mod owners;
mod processes;
mod readme;
mod releases;
mod replicas;
mod report_resends;
mod review;
mod s3;
mod slow_readers;
mod store_contract;
mod streams;
mod tls;
mod uploads;
