//! Issue 12's drill as a test: the handbook's checkout chain as real processes on loopback
//! (gateway → order → inventory / payment / user with budget-agent, fault proxies between
//! order and inventory and between order and payment) against a real `budgetd` process on
//! SQLite, restarted mid-drill. The steps and their checks live in `examples/drill/` (the
//! example anyone can run, `docs/drill.md`); this runs them with a 5 s payment cut and fails
//! on any failed check.
//!
//! Run it alone: `cargo test --test drill` (about a minute and a half; prints the figures with
//! `-- --nocapture`). The child processes are this test binary again, filtered to this test,
//! with their role in `BUDGETD_DRILL_ROLE`.

#[allow(dead_code)]
#[path = "../examples/drill/checks.rs"]
mod checks;
#[allow(dead_code)]
#[path = "../examples/drill/control.rs"]
mod control;
#[allow(dead_code)]
#[path = "../examples/drill/counters.rs"]
mod counters;
#[allow(dead_code)]
#[path = "../examples/drill/final_checks.rs"]
mod final_checks;
#[allow(dead_code)]
#[path = "../examples/drill/load.rs"]
mod load;
#[allow(dead_code)]
#[path = "../examples/drill/proxy.rs"]
mod proxy;
#[allow(dead_code)]
#[path = "../examples/drill/routes.rs"]
mod routes;
#[allow(dead_code)]
#[path = "../examples/drill/scenario.rs"]
mod scenario;
#[allow(dead_code)]
#[path = "../examples/drill/services.rs"]
mod services;
#[allow(dead_code)]
#[path = "../examples/drill/setup.rs"]
mod setup;
#[allow(dead_code)]
#[path = "../examples/drill/step1_normal.rs"]
mod step1_normal;
#[allow(dead_code)]
#[path = "../examples/drill/step2a_slow_inventory.rs"]
mod step2a_slow_inventory;
#[allow(dead_code)]
#[path = "../examples/drill/step2b_retry_storm.rs"]
mod step2b_retry_storm;
#[allow(dead_code)]
#[path = "../examples/drill/step3_payment_cut.rs"]
mod step3_payment_cut;
#[allow(dead_code)]
#[path = "../examples/drill/tally.rs"]
mod tally;

const TEST: &str = "checkout_drill";

#[test]
fn checkout_drill() {
    #[allow(clippy::disallowed_methods)] // tests may read the environment
    if let Ok(spec) = std::env::var(control::ROLE_ENV) {
        let spec = serde_json::from_str(&spec).expect("a role spec in BUDGETD_DRILL_ROLE");
        std::process::exit(services::run_role(spec));
    }
    let work = tempfile::tempdir().unwrap();
    let opts = scenario::Options {
        budgetd: env!("CARGO_BIN_EXE_budgetd").into(),
        launcher: control::Launcher::Test {
            exe: std::env::current_exe().unwrap(),
            test: TEST.into(),
        },
        work_dir: work.path().to_owned(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(scenario::run(scenario::Plan::test(), opts));
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    let checks = match result {
        Ok(checks) => checks,
        Err(e) => {
            let kept = work.keep();
            panic!("{:#}", scenario::with_logs(e, &kept));
        }
    };
    let (ok, text) = scenario::summary(&checks);
    if !ok {
        let kept = work.keep();
        panic!("{text}\n(logs kept in {})", kept.display());
    }
    println!("{text}");
}
