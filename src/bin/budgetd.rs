//! `budgetd`: serve the control plane, manage tokens offline, print the configuration, check
//! the archive, export and import a store. Thin: parse the arguments, build the settings,
//! call the app or one function of `budgetd::service`, print.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use budgetd::config::{LogFormat, Secret, Settings, EXAMPLE};
use budgetd::service::admin;
use clap::{Args, Parser, Subcommand};

/// jemalloc on Linux with glibc: it gives freed memory back to the system within seconds (glibc
/// kept a burst of Reports' 180 MiB resident) and a burst of a fleet's Reports is answered in
/// about half the time (docs/benchmarks.md, "2026-12-06: the server's allocator").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "budgetd",
    version,
    about = "Control plane for timeout budgets: derive, check, approve and publish"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (HTTP on --http, gRPC on --grpc). Embedded default: SQLite and an archive folder under --data-dir.
    Serve {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        listen: Listen,
        /// Load SPEC example A (chain `checkout`, approved) into an empty store.
        #[arg(long)]
        demo: bool,
    },
    /// Manage API tokens directly in the store (same --data-dir / --database-url as serve).
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print a commented example configuration file.
    PrintConfig,
    /// Check or repair the archive of baseline documents
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// Write the whole store (every table but idempotency keys; token hashes, never secrets)
    /// as one JSON document, for backup or to move between SQLite and PostgreSQL.
    Export {
        #[command(flatten)]
        common: Common,
        /// Where to write the document; `-` is standard output.
        #[arg(long, short, value_name = "FILE", default_value = "-")]
        output: PathBuf,
    },
    /// Load a `budgetd export` document into an empty store (creating its schema), in one
    /// transaction, keeping ids, revisions and counters. Run it before any server starts on
    /// that database.
    Import {
        #[command(flatten)]
        common: Common,
        /// The export document; `-` is standard input.
        #[arg(long, short, value_name = "FILE")]
        input: PathBuf,
    },
}

#[derive(Subcommand)]
enum ArchiveCommand {
    /// Re-queue the upload of every baseline whose archived object is missing or differs
    /// (the running servers' workers upload it).
    Backfill {
        #[command(flatten)]
        common: Common,
        /// Only baselines created on this UTC date (YYYY-MM-DD)
        #[arg(long, value_name = "DATE")]
        date: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token and print its secret once.
    Create {
        #[command(flatten)]
        common: Common,
        /// reader, uploader, approver, agent or admin
        #[arg(long)]
        role: String,
        /// A unique name; it is recorded as the actor of everything the token does.
        #[arg(long)]
        name: String,
        /// The person or pipeline the token belongs to (four eyes compares owners)
        /// [default: the name]
        #[arg(long)]
        owner: Option<String>,
    },
    /// Revoke a token by name.
    Revoke {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        name: String,
    },
}

#[derive(Args)]
struct Listen {
    /// HTTP listen address (API, schemas, health, metrics) [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// gRPC listen address (agents' Watch/Ack, health, reflection) [default: 127.0.0.1:50051]
    #[arg(long, value_name = "ADDR")]
    grpc: Option<SocketAddr>,
    /// Where baselines are archived: file://PATH or s3://BUCKET[/PREFIX]
    /// [default: file://{data-dir}/archive]
    #[arg(long, value_name = "URL")]
    archive_url: Option<String>,
    /// PEM certificate chain: serve HTTP and gRPC over TLS (with --tls-key) [tls.cert_file]
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert [tls.key_file]
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

#[derive(Args)]
struct Common {
    /// TOML configuration file (see `budgetd print-config`).
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the embedded SQLite database [default: ./budgetd-data]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// sqlite:PATH or postgres://… (overrides --data-dir)
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
}

impl Common {
    fn settings(&self) -> anyhow::Result<Settings> {
        #[allow(clippy::disallowed_methods)] // main is where the environment is read
        let env: Vec<(String, String)> = std::env::vars().collect();
        let mut settings = Settings::load(self.config.as_deref(), &env)?;
        if let Some(dir) = &self.data_dir {
            settings.data_dir = dir.clone();
        }
        if let Some(url) = &self.database_url {
            settings.database_url = Some(Secret(url.clone()));
        }
        Ok(settings)
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}

/// Starts jemalloc's background thread (one): freed memory goes back to the system within
/// about 10 s even while the server idles (without it, only as later allocations make jemalloc
/// look).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_freed_memory() {
    let one = tikv_jemalloc_ctl::max_background_threads::write(1);
    if let Err(e) = one.and_then(|()| tikv_jemalloc_ctl::background_thread::write(true)) {
        tracing::warn!(error = %e, "jemalloc's background thread did not start; freed memory goes back to the system more slowly");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_freed_memory() {}

async fn serve(common: Common, listen: Listen, demo: bool) -> anyhow::Result<()> {
    let mut settings = common.settings()?;
    if let Some(http) = listen.http {
        settings.http = http;
    }
    if let Some(grpc) = listen.grpc {
        settings.grpc = grpc;
    }
    if let Some(url) = listen.archive_url {
        settings.archive_url = Some(url);
    }
    if let (Some(cert), Some(key)) = (listen.tls_cert, listen.tls_key) {
        settings.tls.cert_file = Some(cert);
        settings.tls.key_file = Some(key);
    }
    init_logging(settings.log_format);
    give_back_freed_memory();
    let app = budgetd::App::build(settings).await?;
    if let Some(file) = app.admin_token_file() {
        // Only where it is: stdout ends up in logs, the token must not.
        banner(format_args!(
            "budgetd: admin token written to {}",
            file.display()
        ));
        banner(format_args!(
            "budgetd:   use it with: export BUDGETD_TOKEN=$(cat {})",
            file.display()
        ));
    }
    if demo && app.load_demo().await? {
        banner(format_args!(
            "budgetd: loaded the demo chain `checkout` (SPEC example A, approved)"
        ));
    }
    let scheme = if app.tls().is_some() { "https" } else { "http" };
    banner(format_args!(
        "budgetd: HTTP API on {scheme}://{}/api/v1",
        app.http_addr()
    ));
    banner(format_args!(
        "budgetd: web console on {scheme}://{}/",
        app.http_addr()
    ));
    banner(format_args!(
        "budgetd: gRPC (budget.v1.BudgetControl) on {}",
        app.grpc_addr()
    ));
    app.run_until_stopped(shutdown_signal()).await
}

/// A line of the startup banner on stdout; a stdout closed meanwhile (`budgetd serve | head`)
/// is no reason to stop serving.
fn banner(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

async fn token(command: TokenCommand) -> anyhow::Result<()> {
    use budget_api::tokens::TokenCreateRequest;
    use budgetd::service::tokens;
    match command {
        TokenCommand::Create {
            common,
            role,
            name,
            owner,
        } => {
            let request = TokenCreateRequest { name, role, owner };
            let issued =
                tokens::create_offline(&common.settings()?.database_url(), request).await?;
            println!("{}", issued.secret.unwrap_or_default());
            eprintln!(
                "created {} token {:?}; the secret above is shown only once",
                issued.record.role, issued.record.name
            );
        }
        TokenCommand::Revoke { common, name } => {
            tokens::revoke_offline(&common.settings()?.database_url(), &name).await?;
            eprintln!("revoked token {name:?}");
        }
    }
    Ok(())
}

async fn backfill(common: Common, date: Option<String>) -> anyhow::Result<()> {
    let done = budgetd::service::archive::backfill(&common.settings()?, date.as_deref()).await?;
    for p in &done.report.problems {
        println!(
            "{}\t{}\t{}{}",
            p.baseline_id,
            p.problem,
            p.key,
            if p.pending {
                "\t(upload already queued)"
            } else {
                ""
            }
        );
    }
    println!(
        "checked {} baseline(s) in {}: {} problem(s), {} upload(s) queued",
        done.report.checked,
        done.archive,
        done.report.problems.len(),
        done.queued
    );
    Ok(())
}

/// Progress of export/import on standard error (the store reports every 10 000 rows of a
/// table and once at its end).
fn report_progress(verb: &'static str) -> impl Fn(&str, u64) + Send + Sync {
    move |table: &str, rows: u64| eprintln!("budgetd: {verb} {table}: {rows} row(s)")
}

async fn export(common: Common, output: PathBuf) -> anyhow::Result<()> {
    let url = common.settings()?.database_url();
    let mut out: Box<dyn std::io::Write + Send> = if output.as_os_str() == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout()))
    } else {
        let file = std::fs::File::create(&output)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", output.display()))?;
        Box::new(std::io::BufWriter::new(file))
    };
    let moved = admin::export(&url, &mut *out, &report_progress("exported")).await?;
    eprintln!(
        "budgetd: exported {} row(s) from {} tables of the {} store",
        moved.total(),
        moved.counts.len(),
        moved.backend
    );
    Ok(())
}

async fn import(common: Common, input: PathBuf) -> anyhow::Result<()> {
    let reader: Box<dyn std::io::Read + Send> = if input.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&input)
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", input.display()))?,
        )
    };
    let export = admin::read_export(reader, input.display().to_string()).await?;
    let url = common.settings()?.database_url();
    let moved = admin::import(&url, &export, &report_progress("imported")).await?;
    eprintln!(
        "budgetd: imported {} row(s) (exported {} from {}) into the {} store",
        moved.total(),
        export.exported_at,
        export.backend,
        moved.backend
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            common,
            listen,
            demo,
        } => serve(common, listen, demo).await,
        Command::Token { command } => token(command).await,
        Command::Archive {
            command: ArchiveCommand::Backfill { common, date },
        } => backfill(common, date).await,
        Command::Export { common, output } => export(common, output).await,
        Command::Import { common, input } => import(common, input).await,
        Command::PrintConfig => {
            print!("{EXAMPLE}");
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("budgetd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
