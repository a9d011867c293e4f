//! Writes the conformance corpus (SPEC §10) into the folder given as the only argument:
//!
//! ```sh
//! cargo run -p budget-core --example conformance -- conformance
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: conformance <folder>");
        return ExitCode::from(2);
    };
    match write(PathBuf::from(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(dir: PathBuf) -> Result<(), String> {
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
    for (name, text) in budget_core::conformance::files().map_err(|e| e.to_string())? {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| format!("failed to write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
