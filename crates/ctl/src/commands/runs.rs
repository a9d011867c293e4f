//! `budgetctl run upload|show|list`. An upload is native JSON sent as is, or load-tool files
//! streamed (one raw body, or a multipart form), with a progress bar on a terminal.

use std::path::{Path, PathBuf};

use budget_api::runs::RunUploadResult;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize as _;
use serde_json::Value;

use super::{get_and_show, read_input, with_query};
use crate::cli::RunCommand;
use crate::output::{print, show};
use crate::{render, Client, CtlError};

pub(super) async fn run(command: RunCommand, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        RunCommand::Upload {
            chain,
            files,
            format,
            unit,
            map,
            quiet,
            dry_run,
        } => {
            let how = How {
                format: format.as_deref(),
                unit: unit.as_deref(),
                map: &map,
                dry_run,
                quiet: json || quiet,
            };
            let v = upload(client, &chain, &files, how).await?;
            if quiet {
                // The draft id alone on stdout, for `DRAFT=$(budgetctl run upload --quiet …)`.
                let outcome = RunUploadResult::deserialize(&v).unwrap_or_default();
                match outcome.baseline_id {
                    Some(id) => print(&id),
                    None => eprintln!("no draft: run {} opened none", outcome.run_id),
                }
                return Ok(());
            }
            show(json, &v, render::run_outcome);
            Ok(())
        }
        RunCommand::Show { chain, run_id } => {
            let url = client.url(&["chains", &chain, "runs", &run_id]);
            get_and_show(client, url, json, render::run).await
        }
        RunCommand::List { chain, limit } => {
            let url = with_query(
                client.url(&["chains", &chain, "runs"]),
                &[("limit", limit.map(|n| n.to_string()))],
            );
            get_and_show(client, url, json, render::runs).await
        }
    }
}

/// Files above this size get a progress bar (on a terminal).
const PROGRESS_FROM: u64 = 4 * 1024 * 1024;

/// `LABEL=PATH` or `PATH` (label: the file stem).
fn split_label(arg: &str) -> (Option<String>, PathBuf) {
    match arg.split_once('=') {
        Some((label, path)) if !label.is_empty() && !Path::new(arg).exists() => {
            (Some(label.to_owned()), PathBuf::from(path))
        }
        _ => (None, PathBuf::from(arg)),
    }
}

fn parse_map(map: &[String]) -> Result<Option<String>, CtlError> {
    if map.is_empty() {
        return Ok(None);
    }
    let mut obj = serde_json::Map::new();
    for m in map {
        let (label, segment) = m
            .rsplit_once('=')
            .filter(|(l, s)| !l.is_empty() && !s.is_empty())
            .ok_or_else(|| {
                CtlError::Input(format!(
                    "--map {m:?}: expected LABEL=SEGMENT, e.g. inventory=order->inventory"
                ))
            })?;
        obj.insert(label.to_owned(), Value::String(segment.to_owned()));
    }
    Ok(Some(Value::Object(obj).to_string()))
}

/// A native upload: one JSON document with `segments`.
fn looks_native(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v.get("segments").is_some())
}

fn progress(total: u64, quiet: bool) -> ProgressBar {
    if quiet || total < PROGRESS_FROM {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

/// A file as a streamed request body that advances `bar`.
async fn streamed(path: &Path, bar: &ProgressBar) -> Result<(reqwest::Body, u64), CtlError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| CtlError::Input(format!("cannot read {}: {e}", path.display())))?;
    let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
    let bar = bar.clone();
    let stream =
        tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).inspect(move |chunk| {
            if let Ok(c) = chunk {
                bar.inc(c.len() as u64);
            }
        });
    Ok((reqwest::Body::wrap_stream(stream), len))
}

/// How `run upload` reads and sends the files: its flags.
struct How<'a> {
    format: Option<&'a str>,
    unit: Option<&'a str>,
    map: &'a [String],
    dry_run: bool,
    /// No progress bar (`--json`, `--quiet`).
    quiet: bool,
}

/// Uploads the run of `files` to `chain` and answers the server's outcome (run id, drift, draft).
async fn upload(
    client: &Client,
    chain: &str,
    files: &[String],
    how: How<'_>,
) -> Result<Value, CtlError> {
    let How {
        format,
        unit,
        map,
        dry_run,
        quiet,
    } = how;
    let mut url = client.url(&["chains", chain, "runs"]);
    if dry_run {
        url.query_pairs_mut().append_pair("dry_run", "true");
    }
    let map = parse_map(map)?;
    // Native JSON: one document, sent as is.
    if files.len() == 1 && matches!(format, None | Some("native")) {
        let (_, path) = split_label(&files[0]);
        let is_small = path.as_os_str() == "-"
            || std::fs::metadata(&path)
                .map(|m| m.len() < 64 * 1024 * 1024)
                .unwrap_or(false);
        if is_small {
            let bytes = read_input(&path)?;
            if format == Some("native") || looks_native(&bytes) {
                return client.post(url, Some(bytes)).await;
            }
        }
    }
    {
        let mut q = url.query_pairs_mut();
        if let Some(f) = format {
            q.append_pair("format", f);
        }
        if let Some(u) = unit {
            q.append_pair("unit", u);
        }
        if let Some(m) = &map {
            q.append_pair("map", m);
        }
    }
    let parsed: Vec<(Option<String>, PathBuf)> = files.iter().map(|f| split_label(f)).collect();
    let mut total = 0;
    for (_, path) in &parsed {
        total += std::fs::metadata(path)
            .map_err(|e| CtlError::Input(format!("cannot read {}: {e}", path.display())))?
            .len();
    }
    let bar = progress(total, quiet);
    bar.set_message("uploading");
    let single_endpoint = matches!(format, Some("oha") | Some("wrk2") | Some("autocannon"));
    let result = if parsed.len() == 1 && !single_endpoint && parsed[0].0.is_none() {
        let (body, _) = streamed(&parsed[0].1, &bar).await?;
        client
            .post_body(url, body, "application/octet-stream")
            .await
    } else {
        let mut form = reqwest::multipart::Form::new();
        for (label, path) in &parsed {
            let name = label.clone().unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "file".into())
            });
            let (body, len) = streamed(path, &bar).await?;
            let file_name = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            form = form.part(
                name,
                reqwest::multipart::Part::stream_with_length(body, len).file_name(file_name),
            );
        }
        client.post_form(url, form).await
    };
    bar.finish_and_clear();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_maps() {
        assert_eq!(
            split_label("inventory=a.json"),
            (Some("inventory".into()), PathBuf::from("a.json"))
        );
        assert_eq!(split_label("a.json"), (None, PathBuf::from("a.json")));
        assert_eq!(
            parse_map(&["inventory=order->inventory".into()])
                .unwrap()
                .unwrap(),
            r#"{"inventory":"order->inventory"}"#
        );
        assert!(parse_map(&["nolabel".into()]).is_err());
        assert!(parse_map(&[]).unwrap().is_none());
        assert!(looks_native(br#"{"segments": []}"#));
        assert!(!looks_native(b"Type,Name,Request Count"));
    }
}
