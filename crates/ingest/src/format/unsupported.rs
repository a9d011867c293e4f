//! Files budgetd does not read but can name: another output of a supported tool (Locust's
//! history, failures or exceptions CSV, oha's or k6's text summary, wrk's or autocannon's text,
//! HistogramLogProcessor's `.hgrm`, JMeter's XML), or an archive. [`recognise`] looks at the
//! first bytes and says what the file is and what to upload instead, so an upload is refused
//! with that rather than "cannot tell the load-test format". Each check is specific to one
//! output, so none matches a file a parser reads (the tests check every fixture).

use crate::framing::csv::{first_line, unquote};
use crate::framing::json::contains;

/// A file recognised as one budgetd does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// What the file is, e.g. "Locust's stats history (*_stats_history.csv)".
    pub what: &'static str,
    /// What to upload instead, with the command that makes it.
    pub instead: &'static str,
}

/// What the start of an input is, when it is a file budgetd can name but does not read.
pub fn recognise(head: &[u8]) -> Option<Unsupported> {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let found = |what, instead| Some(Unsupported { what, instead });
    if let Some(archive) = archive(head) {
        return found(archive, "unpack it and upload the load tool's file (gzip-compressed files are read as they are)");
    }
    let csv: Vec<&[u8]> = first_line(head)
        .split(|&b| b == b',')
        .map(unquote)
        .collect();
    let csv_starts = |names: &[&str]| {
        csv.len() >= names.len()
            && names
                .iter()
                .zip(&csv)
                .all(|(n, f)| f.eq_ignore_ascii_case(n.as_bytes()))
    };
    if csv_starts(&["Timestamp", "User Count", "Type", "Name"]) {
        return found(
            "Locust's stats history (*_stats_history.csv)",
            "upload the *_stats.csv that `locust --csv PREFIX` writes beside it",
        );
    }
    if csv_starts(&["Method", "Name", "Error", "Occurrences"]) {
        return found(
            "Locust's failures list (*_failures.csv)",
            "upload the *_stats.csv that `locust --csv PREFIX` writes beside it",
        );
    }
    if csv_starts(&["Count", "Message", "Traceback"]) {
        return found(
            "Locust's exceptions list (*_exceptions.csv)",
            "upload the *_stats.csv that `locust --csv PREFIX` writes beside it",
        );
    }
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start();
    if trimmed.starts_with("<?xml") || trimmed.starts_with("<testResults") {
        if contains(head, b"<testResults") {
            return found(
                "JMeter's XML results (.jtl as XML)",
                "save results as CSV: jmeter -n -t plan.jmx -l results.jtl -Jjmeter.save.saveservice.output_format=csv",
            );
        }
        return None;
    }
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let has = |p: &dyn Fn(&str) -> bool| lines.iter().any(|l| p(l));
    if has(&|l| l.starts_with("Value") && l.contains("Percentile") && l.contains("TotalCount"))
        && !has(&|l| l.starts_with("Running ") && l.contains(" test @ "))
    {
        return found(
            "HistogramLogProcessor's percentile distribution (.hgrm), not an interval log",
            "upload the .hlog interval log it was made from, with its unit (?unit=ns|us|ms|s, budgetctl --unit)",
        );
    }
    if has(&|l| l.starts_with("Summary:")) && has(&|l| l.starts_with("Success rate:")) {
        return found(
            "oha's text output",
            "run oha with --output-format json (--json in older releases) and upload that",
        );
    }
    if has(&|l| l.starts_with("http_req_duration") && l.contains("avg=")) {
        return found(
            "k6's end-of-test text summary",
            "export JSON: k6 run --summary-export=summary.json --summary-trend-stats=\"med,p(99),p(99.9),count\" (or --out json=points.json for every request)",
        );
    }
    let running = has(&|l| l.starts_with("Running ") && l.contains(" test @ "));
    if running && (text.contains("│ Stat") || text.contains("│ Latency")) {
        return found(
            "autocannon's text output",
            "run autocannon with -j (--json) and upload that",
        );
    }
    // Artillery prints its summary last: a report's first kilobytes hold the run's id, its
    // phases and the per-period metrics.
    let artillery_run = has(&|l| l.starts_with("Summary report @"))
        || (has(&|l| l.starts_with("Test run id: ")) && has(&|l| l.starts_with("Phase started: ")))
        || has(&|l| l.starts_with("Metrics for period to: "));
    if artillery_run && has(&|l| l.starts_with("http.")) {
        return found(
            "Artillery's text report",
            "run artillery with --output report.json and upload that",
        );
    }
    None
}

/// The archive or compression format other than gzip whose magic bytes start `head`.
fn archive(head: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 5] = [
        (b"PK\x03\x04", "a zip archive"),
        (b"BZh", "a bzip2-compressed file"),
        (b"\xfd7zXZ\x00", "an xz-compressed file"),
        (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
        (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    ];
    MAGIC
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, what)| *what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::FIXTURES;

    #[test]
    fn recognises_other_outputs() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%\n1718100000,10,,Aggregated,0,0,0,0\n",
                "stats history",
            ),
            (b"Method,Name,Error,Occurrences\nGET,/a,500,3\n", "failures list"),
            (b"Count,Message,Traceback,Nodes\n", "exceptions"),
            (
                b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testResults version=\"1.2\">\n<httpSample t=\"7\"/>",
                "JMeter's XML",
            ),
            (
                b"       Value     Percentile TotalCount 1/(1-Percentile)\n\n       0.016 0.000000000000          1           1.00\n",
                ".hgrm",
            ),
            (
                b"Summary:\n  Success rate:\t100.00%\n  Total:\t1.2 secs\n",
                "oha's text",
            ),
            (
                b"  scenarios: (100.00%) 1 scenario\n\n     http_req_duration..............: avg=4.71ms min=1.2ms med=4ms\n",
                "k6's end-of-test text",
            ),
            (
                "Running 10s test @ http://127.0.0.1:18080/inventory\n10 connections\n\n┌─────────┬──────┐\n│ Stat    │ 2.5% │\n".as_bytes(),
                "autocannon",
            ),
            (
                b"Summary report @ 10:00:00(+0000)\n\nhttp.codes.200: ... 600\nhttp.response_time:\n",
                "Artillery's text",
            ),
            (b"PK\x03\x04\x14\x00", "zip"),
            (b"BZh91AY&SY", "bzip2"),
            (b"\x28\xb5\x2f\xfd\x00", "zstd"),
        ];
        for (head, what) in cases {
            let got =
                recognise(head).unwrap_or_else(|| panic!("{:?}", String::from_utf8_lossy(head)));
            assert!(got.what.contains(what), "{got:?} / {what}");
            assert!(!got.instead.is_empty());
        }
        // Locust's `--json` output is read (format locust_json), no longer refused.
        let locust_json: &[u8] = b"[\n    {\n        \"name\": \"/inventory\",\n        \"method\": \"GET\",\n        \"num_requests\": 600,\n        \"response_times\": {\"4\": 12}\n    }\n]\n";
        for head in [
            &b""[..],
            b"hello\nworld\n",
            b"{\"segments\": []}",
            locust_json,
            b"[]\n",
        ] {
            assert_eq!(recognise(head), None);
        }
    }

    /// The real tools' text outputs kept beside the fixtures are named, each by its tool.
    #[test]
    fn the_tools_real_text_outputs_are_recognised() {
        let files: &[(&[u8], &str)] = &[
            (
                include_bytes!("../../../../tests/fixtures/autocannon/inventory.txt"),
                "autocannon",
            ),
            (
                include_bytes!("../../../../tests/fixtures/oha/inventory.txt"),
                "oha's text",
            ),
            (
                include_bytes!("../../../../tests/fixtures/k6/summary.txt"),
                "k6's end-of-test text",
            ),
            (
                include_bytes!("../../../../tests/fixtures/artillery/report.txt"),
                "Artillery's text",
            ),
        ];
        for (file, what) in files {
            let got = recognise(file).unwrap_or_else(|| panic!("{what}: not recognised"));
            assert!(got.what.contains(what), "{got:?} / {what}");
            let head = &file[..file.len().min(crate::reader::SNIFF_BYTES)];
            assert_eq!(recognise(head).as_ref(), Some(&got), "{what}");
        }
    }

    /// No file a parser reads is taken for one it does not.
    #[test]
    fn no_fixture_is_recognised_as_unsupported() {
        for f in FIXTURES {
            assert_eq!(recognise(f.bytes), None, "{}", f.name);
            let head = &f.bytes[..f.bytes.len().min(crate::reader::SNIFF_BYTES)];
            assert_eq!(recognise(head), None, "{}", f.name);
        }
    }
}
