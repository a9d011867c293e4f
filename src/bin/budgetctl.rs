//! `budgetctl`: the command-line client of budgetd; everything lives in `budgetd::ctl`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    budgetd::ctl::run(budgetd::ctl::Cli::parse())
}
