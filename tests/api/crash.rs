//! kill -9 at random moments: concurrent writers with `Idempotency-Key`s keep retrying each
//! request with its key until it is answered, while the real `budgetd` process is killed and
//! restarted on the same data directory several times. Afterwards every acknowledged write is
//! there, no key is stuck, no run exists twice, revisions strictly increase and every approved
//! baseline is archived.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::helpers::{ServerProcess, ADMIN_TOKEN};

fn kill9(server: &mut ServerProcess) {
    let _ = server.child.kill(); // SIGKILL
    let _ = server.child.wait();
}

/// Requests sent but not answered because the server died under them, and requests refused
/// a connection while it restarted.
static INTERRUPTED: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);
/// Requests sent and not yet answered: the killer strikes while there are some.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Writers, each on its own chain, and the uploads (each followed by an approval) they make.
const WRITERS: usize = 4;
const ROUNDS: usize = 10;
const KILLS: usize = 6;

/// Sends one request with its key until the server answers it (any status but a connection
/// failure or a 5xx); returns status and body. A stuck key would show up as a 409 here.
async fn until_answered(
    http: &reqwest::Client,
    base: &RwLock<String>,
    method: reqwest::Method,
    path: &str,
    token: &str,
    key: &str,
    body: &Value,
) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "{key}: never answered");
        let url = format!("{}{path}", base.read().unwrap());
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        let sent = http
            .request(method.clone(), url)
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await;
        let answered = match sent {
            Ok(resp) if !resp.status().is_server_error() => {
                let status = resp.status().as_u16();
                // Cut off mid-answer by a kill: ask again.
                resp.json::<Value>()
                    .await
                    .map(|v| (status, v))
                    .map_err(|_| &INTERRUPTED)
            }
            Ok(resp) => panic!("{key}: {}", resp.status()),
            Err(e) if e.is_connect() => Err(&REFUSED),
            Err(_) => Err(&INTERRUPTED),
        };
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        match answered {
            Ok(answer) => return answer,
            Err(counter) => counter.fetch_add(1, Ordering::Relaxed),
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn admin_call(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Value,
) -> Value {
    let resp = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn get(http: &reqwest::Client, base: &str, path: &str) -> Value {
    let resp = http
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// What one writer was told (acknowledged) for its chain.
#[derive(Default, Debug)]
struct Acked {
    runs: Vec<String>,
    approved: Vec<(String, i64)>,
}

async fn writer(
    http: reqwest::Client,
    base: Arc<RwLock<String>>,
    chain: String,
    uploader: String,
    approver: String,
) -> Acked {
    let mut acked = Acked::default();
    let mut run = serde_json::from_str::<Value>(CHECKOUT_RUN_A).unwrap();
    for round in 0..ROUNDS {
        // Alternate payment's p999 by ±30 %: every run drifts from the approved one.
        let p999 = if round % 2 == 0 { 300 } else { 390 };
        for seg in run["segments"].as_array_mut().unwrap() {
            if seg["id"] == "order->payment" {
                seg["p999_ms"] = json!(p999);
            }
        }
        let key = format!("{chain}-upload-{round}");
        let path = format!("/api/v1/chains/{chain}/runs");
        let (status, body) = until_answered(
            &http,
            &base,
            reqwest::Method::POST,
            &path,
            &uploader,
            &key,
            &run,
        )
        .await;
        assert_eq!(status, 201, "{key}: {body}");
        acked.runs.push(body["run_id"].as_str().unwrap().to_owned());
        let draft = body["baseline_id"]
            .as_str()
            .expect("every run drifts: a draft")
            .to_owned();

        let key = format!("{chain}-approve-{round}");
        let path = format!("/api/v1/baselines/{draft}/approve");
        let comment = json!({"comment": "crash test"});
        let (status, body) = until_answered(
            &http,
            &base,
            reqwest::Method::POST,
            &path,
            &approver,
            &key,
            &comment,
        )
        .await;
        assert_eq!(status, 200, "{key}: {body}");
        acked
            .approved
            .push((draft, body["revision"].as_i64().expect("a revision")));
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_loses_no_acknowledged_write_and_sticks_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_owned();
    let dd = data_dir.clone();
    let mut server = tokio::task::spawn_blocking(move || ServerProcess::start_in(&dd, &[]))
        .await
        .unwrap();
    let base = Arc::new(RwLock::new(server.url("")));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    let base0 = server.url("");
    let mut tokens = Vec::new();
    for name in ["crash-uploader", "crash-approver"] {
        let role = if name.ends_with("uploader") {
            "uploader"
        } else {
            "approver"
        };
        let created = admin_call(
            &http,
            &base0,
            reqwest::Method::POST,
            "/api/v1/tokens",
            json!({"name": name, "role": role}),
        )
        .await;
        tokens.push(created["token"].as_str().unwrap().to_owned());
    }
    let chains: Vec<String> = (0..WRITERS).map(|i| format!("crash{i}")).collect();
    for chain in &chains {
        admin_call(
            &http,
            &base0,
            reqwest::Method::PUT,
            &format!("/api/v1/chains/{chain}/topology"),
            serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap(),
        )
        .await;
    }

    let writers: Vec<_> = chains
        .iter()
        .map(|chain| {
            tokio::spawn(writer(
                http.clone(),
                base.clone(),
                chain.clone(),
                tokens[0].clone(),
                tokens[1].clone(),
            ))
        })
        .collect();

    // Kill at random moments (fixed seed), restart on the same data directory.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b696c6c);
    for _ in 0..KILLS {
        // Strike while requests are in flight, at a random moment within them.
        let deadline = Instant::now() + Duration::from_secs(30);
        while IN_FLIGHT.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_micros(rng.gen_range(0..20_000))).await;
        kill9(&mut server);
        let dd = data_dir.clone();
        server = tokio::task::spawn_blocking(move || ServerProcess::start_in(&dd, &[]))
            .await
            .unwrap();
        *base.write().unwrap() = server.url("");
    }

    let mut acked = BTreeMap::new();
    for (chain, w) in chains.iter().zip(writers) {
        acked.insert(
            chain.clone(),
            w.await.expect("writer finished: every key answered"),
        );
    }
    let base = server.url("");
    let (interrupted, refused) = (
        INTERRUPTED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    );
    eprintln!(
        "kill -9 x{KILLS}: {} writes by {WRITERS} writers; {interrupted} requests cut off by a kill, \
         {refused} refused while restarting, all retried with their keys",
        WRITERS * ROUNDS * 2
    );
    assert!(
        interrupted > 0,
        "no kill hit a request in flight: the test proved nothing"
    );

    let mut revisions = BTreeSet::new();
    for (chain, a) in &acked {
        // Every acknowledged run is there, and no run exists twice.
        let runs = get(&http, &base, &format!("/api/v1/chains/{chain}/runs")).await;
        let stored: BTreeSet<&str> = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            stored.len(),
            ROUNDS,
            "{chain}: one run per upload, none duplicated: {stored:?}"
        );
        for id in &a.runs {
            assert!(
                stored.contains(id.as_str()),
                "{chain}: acknowledged run {id} is missing"
            );
        }
        // Every acknowledged approval happened once, in order; the last one is live.
        let mut last = 0;
        for (id, revision) in &a.approved {
            assert!(*revision > last, "{chain}: revisions strictly increase");
            last = *revision;
            assert!(
                revisions.insert(*revision),
                "revision {revision} given twice"
            );
            let doc = get(&http, &base, &format!("/api/v1/baselines/{id}")).await;
            let state = doc["state"].as_str().unwrap();
            assert!(
                state == "approved" || state == "superseded",
                "{id} is {state}"
            );
        }
        let live = get(&http, &base, &format!("/api/v1/chains/{chain}/budgets")).await;
        assert_eq!(live["revision"].as_i64(), Some(last), "{chain}: {live}");
        let baselines = get(&http, &base, &format!("/api/v1/chains/{chain}/baselines")).await;
        let drafts = baselines["baselines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["state"] == "draft")
            .count();
        assert_eq!(drafts, 0, "{chain}: every draft was approved exactly once");
    }

    // Every approved baseline reaches the archive (the outbox survived the kills).
    let deadline = Instant::now() + Duration::from_secs(60);
    for a in acked.values() {
        for (id, _) in &a.approved {
            loop {
                let status = get(&http, &base, &format!("/api/v1/baselines/{id}/archive")).await;
                if status["state"] == "archived" {
                    break;
                }
                assert!(Instant::now() < deadline, "{id} never archived: {status}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
