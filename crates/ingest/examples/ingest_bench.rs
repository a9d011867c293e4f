//! Throughput and peak memory of the streaming ingest parsers on a large generated input.
//!
//! ```text
//! cargo run --release -p budget-ingest --example ingest_bench -- jmeter --gigabytes 1
//! cargo run --release -p budget-ingest --example ingest_bench -- hlog --gigabytes 1
//! ```
//!
//! The input is never held whole: a buffer of about 1 MiB is refilled with fresh rows (times,
//! labels, failures and timestamps vary from row to row) and pushed to the parser in
//! `--chunk`-byte pieces (64 KiB by default, cut anywhere), as an upload arrives. Only the time
//! spent inside `push`/`finish` is counted as parsing; generating the input is not. Peak RSS is
//! the process's `VmHWM` from `/proc/self/status` (generator included).
//!
//! On a shared machine the wall-clock figure drops whenever other work takes the CPU; the
//! `on-CPU` line divides by the CPU time the parsing took, which stays comparable from run to
//! run: that of every thread of the process (the parser may decode on several: Linux
//! `/proc/self/stat`, 10 ms ticks, taken at the start and end of the run, less the calling
//! thread's time generating), and that of the calling thread alone
//! (`/proc/thread-self/schedstat`).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use budget_ingest::format::{hlog, jmeter};
use budget_ingest::{Extracted, Ingest, Options, TimeUnit};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;

const BUFFER: usize = 1 << 20;

const USAGE: &str = "usage: ingest_bench (jmeter|hlog) [--gigabytes N] [--chunk BYTES]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "{USAGE}\n\nGenerates N GB (default 1) of JMeter JTL or HdrHistogram log on the fly and \
             pushes it to the parser in BYTES-byte chunks (default 65536); prints the parse time, \
             throughput (wall and on-CPU), peak RSS and the extracted percentiles."
        );
        return ExitCode::SUCCESS;
    }
    let (format, gigabytes, chunk) = match parse_args(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let total = (gigabytes * 1e9) as u64;
    let (parser, mut generator): (Box<dyn Ingest>, Box<dyn Generator>) = match format.as_str() {
        "jmeter" => (
            jmeter::parser(&Options::default()).expect("jmeter parser"),
            Box::new(Jtl::new()),
        ),
        "hlog" => {
            let options = Options {
                unit: Some(TimeUnit::Us),
                label: None,
            };
            match hlog::parser(&options) {
                Ok(p) => (p, Box::new(Hlog::new())),
                Err(e) => {
                    println!("hlog: not available ({e})");
                    return ExitCode::SUCCESS;
                }
            }
        }
        other => {
            eprintln!("unknown format {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(parser, generator.as_mut(), total, chunk) {
        Ok(report) => {
            report.print(&format, chunk);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{format}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args(args: &[String]) -> Result<(String, f64, usize), String> {
    let mut format = None;
    let mut gigabytes = 1.0;
    let mut chunk = 64 * 1024;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gigabytes" => {
                gigabytes = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|g: &f64| *g > 0.0)
                    .ok_or("--gigabytes N")?
            }
            "--chunk" => {
                chunk = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|c| *c > 0)
                    .ok_or("--chunk BYTES")?
            }
            f if format.is_none() && !f.starts_with('-') => format = Some(f.to_owned()),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok((format.ok_or("which format?")?, gigabytes, chunk))
}

struct Report {
    bytes: u64,
    parse: Duration,
    /// Time the calling thread ran on a CPU while parsing, when the kernel says.
    parse_cpu: Option<Duration>,
    /// Time every thread of the process ran on a CPU while parsing, when the kernel says.
    parse_cpu_all: Option<Duration>,
    wall: Duration,
    extracted: Extracted,
}

impl Report {
    fn print(&self, format: &str, chunk: usize) {
        let secs = self.parse.as_secs_f64();
        println!(
            "{format}: {:.2} GB in {:.2} s of parsing ({:.2} s wall with generation), pushed in {chunk}-byte chunks",
            self.bytes as f64 / 1e9,
            secs,
            self.wall.as_secs_f64()
        );
        println!(
            "throughput: {:.0} MB/s ({:.0} MiB/s)",
            self.bytes as f64 / 1e6 / secs,
            self.bytes as f64 / 1048576.0 / secs
        );
        if let Some(all) = self.parse_cpu_all {
            let all = all.as_secs_f64();
            println!(
                "on-CPU: {:.0} MB/s ({:.2} s of CPU time parsing, all threads; {:.2} CPUs on average)",
                self.bytes as f64 / 1e6 / all,
                all,
                all / secs
            );
        }
        if let Some(cpu) = self.parse_cpu {
            let cpu = cpu.as_secs_f64();
            println!(
                "calling thread: {:.2} s of CPU time parsing ({:.0} MB/s); {:.2} s not on a CPU",
                cpu,
                self.bytes as f64 / 1e6 / cpu,
                (secs - cpu).max(0.0)
            );
        }
        match peak_rss_kib() {
            Some(kib) => println!("peak RSS (VmHWM): {:.1} MB", kib as f64 * 1024.0 / 1e6),
            None => println!("peak RSS: unknown (no /proc/self/status)"),
        }
        let samples: u64 = self.extracted.labels.iter().map(|l| l.samples).sum();
        println!("{} labels, {samples} samples:", self.extracted.labels.len());
        for l in &self.extracted.labels {
            println!(
                "  {:<24} samples {:>10}  failures {:>8}  p50 {:>8} µs  p99 {:>8} µs  p99.9 {:>8} µs",
                l.label,
                l.samples,
                l.failures.map_or("unknown".to_owned(), |f| f.to_string()),
                l.p50_us.unwrap_or(0),
                l.p99_us,
                l.p999_us
            );
        }
    }
}

fn run(
    mut parser: Box<dyn Ingest>,
    generator: &mut dyn Generator,
    total: u64,
    chunk: usize,
) -> Result<Report, String> {
    let start = Instant::now();
    let (process_start, thread_start) = (process_cpu(), thread_cpu());
    let mut parse = Duration::ZERO;
    let mut parse_cpu = Some(Duration::ZERO);
    let mut buf = Vec::with_capacity(BUFFER + 64 * 1024);
    let mut bytes = 0u64;
    generator.header(&mut buf);
    while bytes < total {
        generator.fill(&mut buf);
        let (t, c) = (Instant::now(), thread_cpu());
        for piece in buf.chunks(chunk) {
            parser.push(piece).map_err(|e| e.to_string())?;
        }
        parse += t.elapsed();
        parse_cpu = add_cpu(parse_cpu, c);
        bytes += buf.len() as u64;
        buf.clear();
    }
    let (t, c) = (Instant::now(), thread_cpu());
    let extracted = parser.finish().map_err(|e| e.to_string())?;
    parse += t.elapsed();
    parse_cpu = add_cpu(parse_cpu, c);
    // the process's CPU time less the calling thread's outside the parser (generating)
    let parse_cpu_all = (|| {
        let process = process_cpu()?.checked_sub(process_start?)?;
        let generating = thread_cpu()?
            .checked_sub(thread_start?)?
            .checked_sub(parse_cpu?)?;
        process.checked_sub(generating)
    })();
    Ok(Report {
        bytes,
        parse,
        parse_cpu,
        parse_cpu_all,
        wall: start.elapsed(),
        extracted,
    })
}

/// Time this thread has run on a CPU (the first field of `/proc/thread-self/schedstat`, in ns).
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Time every thread of this process has run on a CPU, ended threads included (`utime` and
/// `stime` of `/proc/self/stat`, in ticks of 10 ms: `USER_HZ` is 100 on Linux).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // after the command's name in parentheses, from the 3rd field on: utime and stime are the
    // 14th and 15th
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// `sum` plus the CPU time since `since`, or `None` once a reading failed.
fn add_cpu(sum: Option<Duration>, since: Option<Duration>) -> Option<Duration> {
    Some(sum? + thread_cpu()?.checked_sub(since?)?)
}

/// Peak resident set size of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

trait Generator {
    /// Writes what comes once at the start (a header line).
    fn header(&mut self, buf: &mut Vec<u8>);
    /// Appends whole lines until `buf` holds at least [`BUFFER`] bytes.
    fn fill(&mut self, buf: &mut Vec<u8>);
}

/// xorshift64: fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A skewed latency in ms: mostly a few ms to tens of ms, a tail to seconds.
    fn latency_ms(&mut self, base: u64) -> u64 {
        let r = self.next();
        match r % 1000 {
            0..=899 => base + r % (base * 2 + 1),
            900..=989 => base * 3 + (r >> 12) % (base * 10 + 1),
            _ => base * 10 + (r >> 12) % 5_000,
        }
    }
}

/// JMeter 5.x JTL rows with a header: 12 labels of different speeds, ~1 % failures with
/// quoted messages.
struct Jtl {
    rng: Rng,
    timestamp: u64,
}

const LABELS: [(&str, &str, u64); 12] = [
    ("inventory", "/api/inventory", 4),
    ("payment", "/api/payment", 30),
    ("user", "/api/user", 12),
    ("search", "/api/search?q=shoes", 25),
    ("cart add", "/api/cart", 8),
    ("cart view", "/api/cart", 6),
    ("checkout", "/api/checkout", 60),
    ("login", "/api/login", 18),
    ("logout", "/api/logout", 3),
    ("product page", "/product/1234", 15),
    ("recommendations", "/api/recommendations", 45),
    ("static bundle", "/static/app.js", 2),
];

impl Jtl {
    fn new() -> Self {
        Self {
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            timestamp: 1_700_000_000_000,
        }
    }
}

impl Generator for Jtl {
    fn header(&mut self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(
            b"timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,\
              bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect\n",
        );
    }

    fn fill(&mut self, buf: &mut Vec<u8>) {
        while buf.len() < BUFFER {
            let r = self.rng.next();
            let (label, path, base) = LABELS[(r % LABELS.len() as u64) as usize];
            let elapsed = self.rng.latency_ms(base);
            let thread = 1 + (r >> 8) % 200;
            let bytes = 200 + (r >> 16) % 20_000;
            self.timestamp += (r >> 24) % 3;
            let failed = (r >> 32) % 100 == 0;
            let (code, message, ok, failure) = if failed {
                (
                    "500",
                    "\"Payment declined, \"\"card\"\" expired\"",
                    "false",
                    "\"Test failed: text expected to contain /\"\"ok\"\":true/\"",
                )
            } else {
                ("200", "OK", "true", "")
            };
            let _ = writeln!(
                buf,
                "{},{elapsed},{label},{code},{message},Shop 1-{thread},text,{ok},{failure},{bytes},{},200,200,\
                 http://127.0.0.1:8080{path},{},0,{}",
                self.timestamp,
                120 + (r >> 40) % 400,
                elapsed.saturating_sub(1 + (r >> 44) % 3),
                (r >> 48) % 3,
            );
        }
    }
}

/// HdrHistogram interval log lines: one tagged 1-second interval per label in turn, each a
/// fresh timestamp over one of a pool of pre-encoded histograms (encoding is not what is
/// measured; the pool makes the intervals differ).
struct Hlog {
    pool: Vec<(String, f64, String)>,
    next: usize,
    start: f64,
}

impl Hlog {
    fn new() -> Self {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut serializer = V2DeflateSerializer::new();
        let mut pool = Vec::new();
        for round in 0..8 {
            for (label, _, base) in LABELS {
                let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
                for _ in 0..2_000 + round * 100 {
                    h.saturating_record(rng.latency_ms(base) * 1000 + rng.next() % 1000);
                }
                let mut text = Vec::new();
                let mut log = IntervalLogWriterBuilder::new()
                    .with_max_value_divisor(1000.0)
                    .begin_log_with(&mut text, &mut serializer)
                    .expect("log writer");
                // hlog tags cannot hold spaces.
                let label = label.replace(' ', "_");
                let tag = Tag::new(&label).expect("tag");
                log.write_histogram(&h, Duration::ZERO, Duration::from_secs(1), Some(tag))
                    .expect("encode");
                drop(log);
                let text = String::from_utf8(text).expect("utf-8");
                let line = text
                    .lines()
                    .find(|l| l.starts_with("Tag="))
                    .expect("an interval line");
                let encoded = line.rsplit(',').next().expect("histogram field").to_owned();
                pool.push((label, h.max() as f64 / 1000.0, encoded));
            }
        }
        Self {
            pool,
            next: 0,
            start: 0.0,
        }
    }
}

impl Generator for Hlog {
    fn header(&mut self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(
            b"#[Histogram log format version 1.3]\n#[StartTime: 1700000000.000 (seconds since epoch)]\n\
              \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
        );
    }

    fn fill(&mut self, buf: &mut Vec<u8>) {
        while buf.len() < BUFFER {
            let (label, max, encoded) = &self.pool[self.next % self.pool.len()];
            self.next += 1;
            if self.next % LABELS.len() == 0 {
                self.start += 1.0;
            }
            let _ = writeln!(
                buf,
                "Tag={label},{:.3},1.000,{max:.3},{encoded}",
                self.start
            );
        }
    }
}
