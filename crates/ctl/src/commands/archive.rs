//! `budgetctl archive verify`: the archive compared with the store; exit 5 on any problem.

use serde_json::json;

use super::with_query;
use crate::cli::ArchiveCommand;
use crate::output::show;
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: ArchiveCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        ArchiveCommand::Verify { date } => {
            let url = with_query(
                client.url(&["archive", "verify"]),
                &[("date", date.clone())],
            );
            let report = client.get(url).await?;
            show(json, &report, render::archive_verify);
            let problems = report["problems"].as_array().map_or(0, Vec::len);
            if problems > 0 {
                return Err(CtlError::conflict(
                    "archive_incomplete",
                    format!(
                        "{problems} archived baseline document(s) missing, differing or \
                         unreadable; `budgetd archive backfill` re-queues their uploads"
                    ),
                    json!({ "date": date, "problems": problems }),
                ));
            }
            Ok(())
        }
    }
}
