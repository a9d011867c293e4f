//! `budgetctl`: the command-line client of the budgetd HTTP API.
//!
//! [`Cli`] is the clap definition, [`run`] executes it and answers the process exit code
//! ([`Exit`]); [`Client`] speaks `/api/v1`, [`render`] turns answers into tables. The binary
//! (`src/bin/budgetctl.rs` of the `budgetd` package) only calls [`main`].
//!
//! - `cli` — the clap tree and its help texts;
//! - `commands/` — one module per resource: build the URL, call the server, show the answer;
//! - [`render`] — one module per resource: a JSON answer as text;
//! - `client` (HTTP, TLS, pagination), `error` (why a command failed, exit codes), `output`
//!   (stdout, `--json`, the error report on stderr).
//!
//! This crate links no server code — no sqlx, axum or AWS SDK (`.ci/run` checks it with
//! `cargo tree`).
#![forbid(unsafe_code)]

mod cli;
mod client;
mod commands;
mod error;
mod output;
pub mod render;

use std::process::ExitCode;

use clap::Parser;

pub use cli::{
    ArchiveCommand, BaselineCommand, BenchCommand, BudgetsCommand, Cli, Command, Global,
    ReleaseCommand, ReportArgs, RunCommand, TokenCommand, TopologyCommand, WatchArgs,
    WebhookCommand, LONG_ABOUT,
};
pub use client::{api_url, parse_base_url, Client};
pub use error::{CtlError, Exit};

/// The binary's `main`: parses the command line (clap exits 2 on a usage error) and runs it.
pub fn main() -> ExitCode {
    run(Cli::parse())
}

/// Runs a parsed command line and answers the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let json = cli.global.json;
    // The benchmark drives thousands of streams: give it every core.
    let mut builder = if matches!(cli.command, Command::Bench(_)) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Internal.into();
        }
    };
    let client = match Client::new(
        cli.global.url,
        cli.global.token,
        cli.global.idempotency_key,
        cli.global.ca_cert.as_deref(),
    ) {
        Ok(client) => client,
        Err(e) => {
            output::report(&e, json, false);
            return e.exit().into();
        }
    };
    match runtime.block_on(commands::execute(cli.command, &client, json)) {
        Ok(()) => Exit::Ok.into(),
        Err(e) => {
            output::report(&e, json, client.has_token());
            e.exit().into()
        }
    }
}
