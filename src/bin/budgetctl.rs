//! `budgetctl`: the command-line client of budgetd; everything lives in the `budgetctl` crate
//! (`crates/ctl`), which links no server code.

fn main() -> std::process::ExitCode {
    budgetctl::main()
}
