//! Releases citing baselines, and the archive of baseline documents: the rules through the
//! HTTP API, then the release pipeline's commands through the real `budgetctl` binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C};
use serde_json::{json, Value};
use sha2::Digest;

use crate::helpers::draft_a;
use crate::helpers::{example, People, TestApp, ADMIN_TOKEN};

/// A release of `service` `version` citing `baseline_id`.
fn release(service: &str, version: &str, baseline_id: &str, ticket: &str) -> Value {
    json!({"service": service, "version": version, "baseline_id": baseline_id, "ticket": ticket})
}

/// The SHA-256 of the baseline document as served now (byte-for-byte the archived JSON).
async fn document_sha256(app: &TestApp, id: &str) -> String {
    let doc = app
        .get(&format!("/api/v1/baselines/{id}"), ADMIN_TOKEN)
        .await
        .expect(200);
    hex::encode(sha2::Sha256::digest(&doc.body))
}

/// Uploads `run` and answers the id of the draft it opened (the run must drift).
async fn draft_from(app: &TestApp, p: &People, run: &str) -> String {
    let v = app
        .upload(&p.uploader, "checkout", example(run))
        .await
        .expect(201)
        .json();
    v["baseline_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the run opened no draft: {v}"))
        .to_owned()
}

async fn reject(app: &TestApp, p: &People, id: &str) {
    app.post(
        &format!("/api/v1/baselines/{id}/reject"),
        &p.approver,
        json!({"comment": "degraded during the test"}),
    )
    .await
    .expect(200);
}

/// The ids of a release list.
fn ids(v: &Value) -> Vec<i64> {
    v["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

async fn releases_cite_approved_baselines(app: &TestApp) {
    let p = app.people().await;
    let a_id = draft_a(app, &p).await;

    // A draft cannot be cited.
    let refused = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("order", "1.4.2", &a_id, "CHG-1"),
        )
        .await
        .expect(422);
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("draft"),
        "{}",
        refused.json()
    );

    app.approve(&p.approver, &a_id).await.expect(200);
    let sha_a = document_sha256(app, &a_id).await;
    let r1 = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("order", "1.4.2", &a_id, "CHG-1"),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(r1["service"], "order");
    assert_eq!(r1["version"], "1.4.2");
    assert_eq!(r1["baseline_id"], a_id.as_str());
    assert_eq!(r1["ticket"], "CHG-1");
    assert_eq!(r1["created_by"], "uma");
    assert!(r1["created_at"].is_string(), "{r1}");
    assert_eq!(
        r1["baseline_sha256"], sha_a,
        "the release keeps the SHA-256 of the document it cites"
    );
    let r1_id = r1["id"].as_i64().unwrap();
    // Approvers and admins may record too; readers may not.
    let r2 = app
        .post(
            "/api/v1/releases",
            &p.approver,
            release("search", "7.0.0", &a_id, "CHG-2"),
        )
        .await
        .expect(201)
        .json();
    let r2_id = r2["id"].as_i64().unwrap();
    assert_eq!(r2["created_by"], "abe");
    let reader = app.token("reader", "rita").await;
    app.post(
        "/api/v1/releases",
        &reader,
        release("order", "1.4.3", &a_id, "CHG-3"),
    )
    .await
    .expect(403);

    // Unknown baselines and missing or empty fields: 422, pointing at the field.
    let unknown = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("order", "1.4.3", "bl-20000101-001", "CHG-3"),
        )
        .await
        .expect(422);
    assert_eq!(
        unknown.json()["error"]["details"]["violations"][0]["pointer"],
        "/baseline_id"
    );
    for field in ["service", "version", "baseline_id", "ticket"] {
        let mut body = release("order", "1.4.3", &a_id, "CHG-3");
        body.as_object_mut().unwrap().remove(field);
        let a = app
            .post("/api/v1/releases", &p.uploader, body.clone())
            .await
            .expect(422);
        assert_eq!(
            a.json()["error"]["details"]["violations"][0]["pointer"],
            format!("/{field}"),
            "without {field}"
        );
        body[field] = json!("  ");
        app.post("/api/v1/releases", &p.uploader, body.clone())
            .await
            .expect(422);
        body[field] = json!(42);
        app.post("/api/v1/releases", &p.uploader, body)
            .await
            .expect(422);
    }
    app.post("/api/v1/releases", &p.uploader, json!({}))
        .await
        .expect(422);
    app.post("/api/v1/releases", &p.uploader, json!(["order"]))
        .await
        .expect(422);

    // Filters: by baseline, by service, both, limit.
    let all = app
        .get(&format!("/api/v1/releases?baseline_id={a_id}"), &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&all), [r2_id, r1_id], "newest first");
    let order = app
        .get("/api/v1/releases?service=order", &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&order), [r1_id]);
    assert_eq!(order["releases"][0], r1);
    let both = app
        .get(
            &format!("/api/v1/releases?baseline_id={a_id}&service=search"),
            &reader,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&both), [r2_id]);
    let none = app
        .get("/api/v1/releases?baseline_id=bl-20000101-001", &reader)
        .await
        .expect(200)
        .json();
    assert!(ids(&none).is_empty());
    let one = app
        .get("/api/v1/releases?limit=1", &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&one), [r2_id]);
    app.get("/api/v1/releases?limit=0", &reader)
        .await
        .expect(400);

    // The baseline's own view lists the releases citing it.
    let of_a = app
        .get(&format!("/api/v1/baselines/{a_id}/releases"), &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&of_a), [r2_id, r1_id]);
    app.get("/api/v1/baselines/bl-20000101-001/releases", &reader)
        .await
        .expect(404);

    // A newer baseline: the drafted one cannot be cited until approved; the superseded one
    // still can (a release cites a baseline id, not whatever is live).
    let c_id = draft_from(app, &p, CHECKOUT_RUN_C).await;
    app.post(
        "/api/v1/releases",
        &p.uploader,
        release("order", "1.5.0", &c_id, "CHG-4"),
    )
    .await
    .expect(422);
    app.approve(&p.approver, &c_id).await.expect(200);
    assert_eq!(app.baseline(&a_id).await["state"], "superseded");
    let old = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("legacy", "0.9.1", &a_id, "CHG-5"),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(old["baseline_sha256"], document_sha256(app, &a_id).await);
    let new = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("order", "1.5.0", &c_id, "CHG-4"),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(new["baseline_sha256"], document_sha256(app, &c_id).await);

    // A rejected baseline cannot be cited. Run A against C drifts (payment p999 390 → 300).
    let d_id = draft_from(app, &p, CHECKOUT_RUN_A).await;
    reject(app, &p, &d_id).await;
    let refused = app
        .post(
            "/api/v1/releases",
            &p.uploader,
            release("order", "1.5.1", &d_id, "CHG-6"),
        )
        .await
        .expect(422);
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rejected"),
        "{}",
        refused.json()
    );
    let of_d = app
        .get(&format!("/api/v1/baselines/{d_id}/releases"), &reader)
        .await
        .expect(200)
        .json();
    assert!(ids(&of_d).is_empty());
    let of_a = app
        .get(&format!("/api/v1/baselines/{a_id}/releases"), &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(ids(&of_a).len(), 3);
}

/// What one `budgetctl` run did.
#[derive(Debug)]
pub(crate) struct Ctl {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ctl {
    #[track_caller]
    pub fn expect(self, code: i32) -> Self {
        assert_eq!(self.code, code, "budgetctl answered {self:#?}");
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// Runs the real `budgetctl` against `app` with `token`.
pub(crate) async fn budgetctl(app: &TestApp, token: &str, args: &[&str]) -> Ctl {
    let url = app.url("").trim_end_matches('/').to_owned();
    let token = token.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_budgetctl"))
            .args(&args)
            .env("BUDGETD_URL", url)
            .env("BUDGETD_TOKEN", token)
            .output()
    })
    .await
    .unwrap()
    .expect("budgetctl runs");
    Ctl {
        code: out.status.code().expect("budgetctl exits (not killed)"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Waits until every baseline's current document is archived (uploads are asynchronous).
async fn wait_archived(app: &TestApp, ids: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for id in ids {
        loop {
            let status = app
                .get(&format!("/api/v1/baselines/{id}/archive"), ADMIN_TOKEN)
                .await
                .expect(200)
                .json();
            if status["state"] == "archived" {
                assert_eq!(status["sha256"], document_sha256(app, id).await);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{id} not archived within 15 s: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The file of an archived baseline document.
fn archived_file(archive_root: &Path, key: &str) -> PathBuf {
    key.split('/')
        .fold(archive_root.to_path_buf(), |p, k| p.join(k))
}

async fn release_pipeline_through_budgetctl(app: &TestApp) {
    let p = app.people().await;
    let reader = app.token("reader", "rita").await;
    let a_id = draft_a(app, &p).await;

    // A draft: not citable, not releasable.
    let draft = budgetctl(app, &reader, &["release", "check", "--baseline", &a_id]).await;
    let draft = draft.expect(5);
    assert!(draft.stderr.contains("draft"), "{draft:#?}");

    app.approve(&p.approver, &a_id).await.expect(200);
    let sha_a = document_sha256(app, &a_id).await;

    // record: exit 0, the release as JSON with --json.
    let rec = budgetctl(
        app,
        &p.uploader,
        &[
            "release",
            "record",
            "--service",
            "order",
            "--version",
            "1.4.2",
            "--baseline",
            &a_id,
            "--ticket",
            "CHG-1",
            "--json",
        ],
    )
    .await
    .expect(0);
    let r1 = rec.json();
    assert_eq!(
        (r1["service"].as_str(), r1["baseline_id"].as_str()),
        (Some("order"), Some(a_id.as_str()))
    );
    assert_eq!(r1["baseline_sha256"], sha_a);
    let rec = budgetctl(
        app,
        &p.uploader,
        &[
            "release",
            "record",
            "--service",
            "search",
            "--version",
            "7.0.0",
            "--baseline",
            &a_id,
            "--ticket",
            "CHG-2",
        ],
    )
    .await
    .expect(0);
    assert!(
        rec.stdout.contains(&format!("baseline: {a_id}")),
        "{rec:#?}"
    );
    // A reader may not record (6); an unknown baseline is rejected input (4).
    budgetctl(
        app,
        &reader,
        &[
            "release",
            "record",
            "--service",
            "order",
            "--version",
            "1",
            "--baseline",
            &a_id,
            "--ticket",
            "T",
        ],
    )
    .await
    .expect(6);
    budgetctl(
        app,
        &p.uploader,
        &[
            "release",
            "record",
            "--service",
            "order",
            "--version",
            "1",
            "--baseline",
            "bl-20000101-001",
            "--ticket",
            "T",
        ],
    )
    .await
    .expect(4);

    // list, filtered.
    let list = budgetctl(
        app,
        &reader,
        &["release", "list", "--baseline", &a_id, "--service", "order"],
    )
    .await
    .expect(0);
    assert!(list.stdout.contains("1.4.2"), "{list:#?}");
    assert!(!list.stdout.contains("7.0.0"), "{list:#?}");
    let list = budgetctl(app, &reader, &["release", "list", "--json"])
        .await
        .expect(0)
        .json();
    assert_eq!(list["releases"].as_array().unwrap().len(), 2);

    // check: the approved baseline passes, on its chain only.
    let ok = budgetctl(app, &reader, &["release", "check", "--baseline", &a_id])
        .await
        .expect(0);
    assert!(ok.stdout.contains("ok: "), "{ok:#?}");
    budgetctl(
        app,
        &reader,
        &[
            "release",
            "check",
            "--baseline",
            &a_id,
            "--chain",
            "checkout",
        ],
    )
    .await
    .expect(0);
    let wrong = budgetctl(
        app,
        &reader,
        &["release", "check", "--baseline", &a_id, "--chain", "search"],
    )
    .await
    .expect(5);
    assert!(wrong.stderr.contains("not search"), "{wrong:#?}");
    let unknown = budgetctl(
        app,
        &reader,
        &["release", "check", "--baseline", "bl-20000101-001"],
    )
    .await;
    unknown.expect(3);

    // baseline show: the document, its archive state and the releases citing it.
    wait_archived(app, &[&a_id]).await;
    let shown = budgetctl(app, &reader, &["baseline", "show", &a_id])
        .await
        .expect(0);
    // The key's date is the creation date as YYYY-MM-DD; the id holds it as YYYYMMDD.
    let d = &a_id[3..11];
    let key = format!("gov/bench/{}-{}-{}/{a_id}.json", &d[..4], &d[4..6], &d[6..]);
    for part in [
        "archive:\n  state:       archived\n".to_owned(),
        format!("  key:         {key}\n"),
        "  attempts:    ".to_owned(),
        "  last error:  -\n".to_owned(),
        "  archived at: ".to_owned(),
        "releases: 2\n".to_owned(),
        "CHG-1".to_owned(),
        "CHG-2".to_owned(),
    ] {
        assert!(shown.stdout.contains(&part), "{part:?} in {shown:#?}");
    }
    let as_json = budgetctl(app, &reader, &["baseline", "show", &a_id, "--json"])
        .await
        .expect(0)
        .json();
    assert_eq!(
        as_json,
        app.baseline(&a_id).await,
        "--json: the document only"
    );

    // A newer approved baseline supersedes A: checking A names it.
    let c_id = draft_from(app, &p, CHECKOUT_RUN_C).await;
    app.approve(&p.approver, &c_id).await.expect(200);
    let old = budgetctl(app, &reader, &["release", "check", "--baseline", &a_id])
        .await
        .expect(5);
    assert!(old.stderr.contains("superseded"), "{old:#?}");
    assert!(
        old.stderr.contains(&c_id),
        "names the current one: {old:#?}"
    );
    let old = budgetctl(
        app,
        &reader,
        &["release", "check", "--baseline", &a_id, "--json"],
    )
    .await
    .expect(5);
    let err: Value = serde_json::from_str(&old.stderr).unwrap();
    assert_eq!(err["error"]["code"], "superseded");
    assert_eq!(
        err["error"]["details"]["current_baseline_id"],
        c_id.as_str()
    );
    let allowed = budgetctl(
        app,
        &reader,
        &[
            "release",
            "check",
            "--baseline",
            &a_id,
            "--allow-superseded",
        ],
    )
    .await
    .expect(0);
    assert!(allowed.stdout.contains(&c_id), "{allowed:#?}");
    let current = budgetctl(
        app,
        &reader,
        &["release", "check", "--baseline", &c_id, "--json"],
    )
    .await
    .expect(0)
    .json();
    assert_eq!(current["ok"], true);
    assert_eq!(current["current_baseline_id"], c_id.as_str());
    // A superseded baseline can still be recorded.
    budgetctl(
        app,
        &p.uploader,
        &[
            "release",
            "record",
            "--service",
            "legacy",
            "--version",
            "0.9.1",
            "--baseline",
            &a_id,
            "--ticket",
            "CHG-3",
        ],
    )
    .await
    .expect(0);

    // A rejected draft fails the check, naming the current baseline.
    let d_id = draft_from(app, &p, CHECKOUT_RUN_A).await;
    reject(app, &p, &d_id).await;
    let rejected = budgetctl(app, &reader, &["release", "check", "--baseline", &d_id])
        .await
        .expect(5);
    assert!(rejected.stderr.contains("rejected"), "{rejected:#?}");
    assert!(rejected.stderr.contains(&c_id), "{rejected:#?}");

    // archive verify: complete once every upload has landed…
    wait_archived(app, &[&a_id, &c_id, &d_id]).await;
    let verified = budgetctl(app, &p.approver, &["archive", "verify"])
        .await
        .expect(0);
    assert!(
        verified
            .stdout
            .contains("3 baseline(s) checked, none missing or differing"),
        "{verified:#?}"
    );
    let status = app
        .get(&format!("/api/v1/baselines/{a_id}/archive"), ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    let key_a = status["key"].as_str().unwrap().to_owned();
    let date = key_a.split('/').nth(2).unwrap().to_owned();
    let dated = budgetctl(app, &p.approver, &["archive", "verify", "--date", &date])
        .await
        .expect(0);
    assert!(
        dated.stdout.contains(&format!("created on {date}")),
        "{dated:#?}"
    );
    let other_day = budgetctl(
        app,
        &p.approver,
        &["archive", "verify", "--date", "2000-01-01"],
    )
    .await
    .expect(0);
    assert!(
        other_day
            .stdout
            .contains("0 baseline(s) created on 2000-01-01"),
        "{other_day:#?}"
    );
    budgetctl(
        app,
        &p.approver,
        &["archive", "verify", "--date", "01/02/2026"],
    )
    .await
    .expect(2);

    // …and exit 5 listing every baseline whose object differs or is missing.
    let archive_root = app.archive_dir.path();
    let file_a = archived_file(archive_root, &key_a);
    assert!(file_a.is_file(), "{} is archived", file_a.display());
    std::fs::write(&file_a, b"{\"tampered\": true}").unwrap();
    let key_c = app
        .get(&format!("/api/v1/baselines/{c_id}/archive"), ADMIN_TOKEN)
        .await
        .expect(200)
        .json()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(archived_file(archive_root, &key_c)).unwrap();
    let broken = budgetctl(app, &p.approver, &["archive", "verify"])
        .await
        .expect(5);
    assert!(
        broken
            .stdout
            .starts_with("archive: 2 of 3 baseline(s) missing, differing or unreadable"),
        "{broken:#?}"
    );
    for (id, problem) in [(&a_id, "differs"), (&c_id, "missing")] {
        assert!(
            broken
                .stdout
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains(problem)),
            "{id} {problem}: {broken:#?}"
        );
    }
    assert!(!broken.stdout.contains(&d_id), "{broken:#?}");
    assert!(broken.stderr.contains("2 archived baseline"), "{broken:#?}");
    let as_json = budgetctl(app, &p.approver, &["archive", "verify", "--json"])
        .await
        .expect(5)
        .json();
    let mut problems: Vec<(String, String)> = as_json["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["baseline_id"].as_str().unwrap().to_owned(),
                p["problem"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    problems.sort();
    let mut expect = vec![
        (a_id.clone(), "differs".to_owned()),
        (c_id.clone(), "missing".to_owned()),
    ];
    expect.sort();
    assert_eq!(problems, expect);
}

crate::on_both_backends!(
    releases_cite_approved_baselines,
    release_pipeline_through_budgetctl
);
