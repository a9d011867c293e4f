//! Kill rates (SPEC §3 `timeout_kill_rate`): every run keeps its latency distribution, every
//! draft segment says what its timeout kills of the load test's calls, a timeout far below the
//! measured tail is a finding, and `GET /baselines/{id}/whatif` answers for any timeout.

use base64::Engine as _;
use serde_json::{json, Value};

use crate::formats::{fixture, labelled_topology, send, Upload};
use crate::helpers::{spawn_app, Backend, People, TestApp, ADMIN_TOKEN};
use crate::releases::budgetctl;

/// The seed's inventory read: 10,000 calls with P99 180 ms and P999 420 ms, a quarter of them
/// slower than 100 ms (7,500 at 50 ms, 2,300 at 150, 100 at 180, 89 at 300, 11 at 420).
const INVENTORY: [(u64, usize); 5] = [(50, 7_500), (150, 2_300), (180, 100), (300, 89), (420, 11)];

/// Latencies (ms) of each label of the seed run: inventory as above; payment and user fast and
/// tight, so their derived timeouts kill little.
fn seed_samples() -> Vec<(&'static str, Vec<u64>)> {
    let inventory = INVENTORY
        .iter()
        .flat_map(|&(ms, n)| std::iter::repeat_n(ms, n))
        .collect();
    let payment = (0..2_000).map(|i| 60 + i % 90).collect();
    let user = (0..2_000).map(|i| 5 + i % 12).collect();
    vec![
        ("inventory", inventory),
        ("payment", payment),
        ("user", user),
    ]
}

/// The samples as a JMeter JTL (CSV with a header), rows interleaved as threads write them.
fn jtl(samples: &[(&str, Vec<u64>)]) -> Vec<u8> {
    let mut out = String::from(
        "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,bytes,\
         grpThreads,allThreads,Latency\n",
    );
    let longest = samples.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    let mut ts = 1_796_023_259_711u64;
    for i in 0..longest {
        for (label, values) in samples {
            if let Some(ms) = values.get(i) {
                ts += 1;
                out.push_str(&format!(
                    "{ts},{ms},{label},200,OK,Shop 1-1,text,true,176,2,2,{ms}\n"
                ));
            }
        }
    }
    out.into_bytes()
}

/// Share of `values` (ms) slower than `timeout_ms`, counted here from the samples themselves.
fn slower(values: &[u64], timeout_ms: u64) -> usize {
    values.iter().filter(|&&v| v > timeout_ms).count()
}

fn segment<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no segment {id} in {doc}"))
}

fn kill_findings(doc: &Value) -> Vec<Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "timeout_kill_rate")
        .cloned()
        .collect()
}

/// The checkout topology with the tools' labels, inventory pinned at `pinned` ms (or not), and
/// the chain's kill-rate thresholds when given.
fn topology(pinned: Option<u64>, thresholds: Option<Value>) -> String {
    let mut t = labelled_topology();
    if let Some(ms) = pinned {
        t["segments"][1]["pinned_timeout_ms"] = ms.into();
    }
    if let Some(th) = thresholds {
        t["kill_rate"] = th;
    }
    t.to_string()
}

async fn upload_jtl(app: &TestApp, token: &str, body: Vec<u8>) -> Value {
    send(
        app,
        token,
        "checkout",
        &Upload::Raw {
            query: "?format=jmeter",
            body,
        },
    )
    .await
    .expect(201)
    .json()
}

async fn whatif(app: &TestApp, id: &str, segment: &str, timeout_ms: u64) -> Value {
    app.get(
        &format!("/api/v1/baselines/{id}/whatif?segment={segment}&timeout_ms={timeout_ms}"),
        ADMIN_TOKEN,
    )
    .await
    .expect(200)
    .json()
}

async fn recompute(app: &TestApp, p: &People, run_id: &str) -> Value {
    let id = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &p.uploader,
            json!({ "run_id": run_id }),
        )
        .await
        .expect(201)
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.baseline(&id).await
}

/// The seed's first incident: inventory pinned at 100 ms with P99 180 / P999 420 kills a
/// quarter of its healthy calls, and each killed call's retry makes 1.25 attempts per call.
async fn the_seed_story(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", &topology(Some(100), None))
        .await
        .expect(201);
    let samples = seed_samples();
    let up = upload_jtl(app, &p.uploader, jtl(&samples)).await;
    let run_id = up["run_id"].as_str().unwrap().to_owned();
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let doc = app.baseline(&id).await;

    // The answer lists percentiles only; the stored run says what it keeps, and its size.
    assert!(
        up["segments"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.get("distribution").is_none()),
        "{up}"
    );
    let stored = app
        .get(
            &format!("/api/v1/chains/checkout/runs/{run_id}"),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    for s in stored["segments"].as_array().unwrap() {
        let bytes = s["distribution_bytes"].as_u64().unwrap();
        assert_eq!(s["distribution"], "histogram", "{s}");
        assert!(
            (16..4096).contains(&bytes),
            "a few hundred bytes of base64: {s}"
        );
    }
    // A list of runs reads no distribution (kilobytes per segment): it says none.
    let list = app
        .get("/api/v1/chains/checkout/runs", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    let listed = &list["runs"][0];
    assert_eq!(listed["id"], run_id.as_str());
    assert!(
        listed["segments"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["distribution"].is_null()),
        "{listed}"
    );

    let inventory = &samples[0].1;
    let killed = slower(inventory, 100);
    assert_eq!(killed, 2_500);
    let inv = segment(&doc, "order->inventory");
    assert_eq!(
        (inv["p99_ms"].as_f64(), inv["p999_ms"].as_f64()),
        (Some(180.0), Some(420.0))
    );
    assert_eq!(
        (inv["timeout_ms"].as_u64(), inv["rule"].as_str()),
        (Some(100), Some("pinned"))
    );
    assert_eq!(inv["kill_rate"].as_f64(), Some(killed as f64 / 10_000.0));
    assert_eq!(inv["attempts_per_call"].as_f64(), Some(1.25));
    assert!(inv.get("kill_rate_bounds").is_none(), "{inv}");

    // One error finding, in numbers; the draft cannot be approved.
    let findings = kill_findings(&doc);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(
        (f["segment"].as_str(), f["severity"].as_str()),
        (Some("order->inventory"), Some("error"))
    );
    assert_eq!(
        (
            f["timeout_ms"].as_u64(),
            f["kill_rate"].as_f64(),
            f["killed"].as_u64(),
            f["samples"].as_u64()
        ),
        (Some(100), Some(0.25), Some(2_500), Some(10_000))
    );
    assert_eq!(
        (f["attempts_per_call"].as_f64(), f["threshold"].as_f64()),
        (Some(1.25), Some(0.1))
    );
    let message = f["message"].as_str().unwrap();
    for part in [
        "100 ms timeout",
        "kills 25 %",
        "2500 of 10000",
        "1.25 attempts per call",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    let approve = app.approve(&p.approver, &id).await.expect(422).json();
    assert!(
        approve.to_string().contains("timeout_kill_rate"),
        "{approve}"
    );

    // The others' derived timeouts kill what the samples say: user does not retry.
    for (label, seg) in [("payment", "order->payment"), ("user", "order->user")] {
        let values = &samples.iter().find(|(l, _)| *l == label).unwrap().1;
        let s = segment(&doc, seg);
        let timeout = s["timeout_ms"].as_u64().unwrap();
        let share = slower(values, timeout) as f64 / values.len() as f64;
        assert_eq!(
            s["kill_rate"].as_f64(),
            Some((share * 1e6).round() / 1e6),
            "{s}"
        );
        assert!(
            s.get("attempts_per_call").is_none(),
            "{seg} does not retry on deadline: {s}"
        );
    }

    // What-if, from the stored histogram, for any timeout.
    for timeout in [1, 49, 50, 100, 179, 180, 198, 299, 420, 421] {
        let w = whatif(app, &id, "order->inventory", timeout).await;
        let killed = slower(inventory, timeout);
        assert_eq!(
            (w["killed"].as_u64(), w["samples"].as_u64()),
            (Some(killed as u64), Some(10_000)),
            "timeout {timeout}: {w}"
        );
        assert_eq!(w["kill_rate"].as_f64(), Some(killed as f64 / 10_000.0));
        assert_eq!(
            w["attempts_per_call"].as_f64(),
            Some(1.0 + killed as f64 / 10_000.0)
        );
        assert_eq!(
            (w["source"].as_str(), w["retries_on_deadline"].as_bool()),
            (Some("histogram"), Some(true))
        );
        assert_eq!(
            (w["baseline_timeout_ms"].as_u64(), w["run_id"].as_str()),
            (Some(100), Some(run_id.as_str()))
        );
    }
    let w = whatif(app, &id, "order->user", 6).await;
    assert_eq!(
        (
            w["attempts_per_call"].as_f64(),
            w["retries_on_deadline"].as_bool()
        ),
        (Some(1.0), Some(false))
    );

    // Unpinned, the derived timeout (P99 × 1.1 = 198 ms) kills 1 %: no finding.
    app.apply_topology(&p.uploader, "checkout", &topology(None, None))
        .await
        .expect(201);
    let derived = recompute(app, &p, &run_id).await;
    let inv = segment(&derived, "order->inventory");
    assert_eq!(
        (inv["timeout_ms"].as_u64(), inv["rule"].as_str()),
        (Some(198), Some("p99_plus10"))
    );
    assert_eq!(
        inv["kill_rate"].as_f64(),
        Some(slower(inventory, 198) as f64 / 10_000.0)
    );
    assert_eq!(inv["kill_rate"].as_f64(), Some(0.01));
    assert!(kill_findings(&derived).is_empty(), "{derived}");

    // The chain's own thresholds: 25 % is only a warning above 20 % with the error at 30 %.
    app.apply_topology(
        &p.uploader,
        "checkout",
        &topology(Some(100), Some(json!({"warning": 0.2, "error": 0.3}))),
    )
    .await
    .expect(201);
    let lenient = recompute(app, &p, &run_id).await;
    let findings = kill_findings(&lenient);
    assert_eq!(findings.len(), 1);
    assert_eq!(
        (
            findings[0]["severity"].as_str(),
            findings[0]["threshold"].as_f64()
        ),
        (Some("warning"), Some(0.2))
    );
    let bad = app
        .apply_topology(
            &p.uploader,
            "checkout",
            &topology(Some(100), Some(json!({"warning": 0.5, "error": 0.1}))),
        )
        .await
        .expect(422)
        .json();
    assert!(bad.to_string().contains("/kill_rate/warning"), "{bad}");

    // budgetctl: the table's kill column, and whatif.
    let show = budgetctl(app, ADMIN_TOKEN, &["baseline", "show", &id])
        .await
        .expect(0);
    assert!(
        show.stdout.contains("25 % (1.25 attempts/call)"),
        "{}",
        show.stdout
    );
    let ctl = budgetctl(
        app,
        ADMIN_TOKEN,
        &[
            "baseline",
            "whatif",
            &id,
            "--segment",
            "order->inventory",
            "--timeout",
            "100ms",
        ],
    )
    .await
    .expect(0);
    assert!(
        ctl.stdout
            .contains("25 % of the load test's calls (2500 of 10000 samples slower)")
            && ctl
                .stdout
                .contains("1.25 (each killed call is retried once)"),
        "{}",
        ctl.stdout
    );
    let ctl = budgetctl(
        app,
        ADMIN_TOKEN,
        &[
            "--json",
            "baseline",
            "whatif",
            &id,
            "--segment",
            "order->inventory",
            "--timeout",
            "198",
        ],
    )
    .await
    .expect(0)
    .json();
    assert_eq!(ctl["kill_rate"].as_f64(), Some(0.01));
    let wrong = budgetctl(
        app,
        ADMIN_TOKEN,
        &[
            "baseline",
            "whatif",
            &id,
            "--segment",
            "order->inventory",
            "--timeout",
            "0",
        ],
    )
    .await;
    assert_eq!(wrong.code, 2, "{wrong:?}");
}

/// What-if's questions that have no answer say why.
async fn whatif_errors(app: &TestApp) {
    let p = app.people().await;
    let id = crate::helpers::draft_a(app, &p).await;
    let get = |q: &str| {
        let path = format!("/api/v1/baselines/{id}/whatif{q}");
        async move { app.get(&path, ADMIN_TOKEN).await }
    };
    // Run A is a native upload of percentiles only: no distribution to answer from.
    let none = get("?segment=order->inventory&timeout_ms=100")
        .await
        .expect(404)
        .json();
    assert!(
        none.to_string().contains("holds no latency distribution"),
        "{none}"
    );
    get("?timeout_ms=100").await.expect(400);
    get("?segment=order->inventory").await.expect(400);
    get("?segment=order->inventory&timeout_ms=0")
        .await
        .expect(400);
    let long = get("?segment=order->inventory&timeout_ms=3600001")
        .await
        .expect(400)
        .json();
    assert!(
        long.to_string().contains("from 1 to 3600000"),
        "an hour at most: {long}"
    );
    get("?segment=order->inventory&timeout_ms=ten")
        .await
        .expect(400);
    let unknown = get("?segment=order->nowhere&timeout_ms=10")
        .await
        .expect(404)
        .json();
    assert!(
        unknown.to_string().contains("order->inventory"),
        "lists the segments: {unknown}"
    );
    app.get(
        "/api/v1/baselines/bl-20990101-001/whatif?segment=x&timeout_ms=1",
        ADMIN_TOKEN,
    )
    .await
    .expect(404);
    app.get(&format!("/api/v1/baselines/{id}/distribution"), ADMIN_TOKEN)
        .await
        .expect(400);
}

crate::on_both_backends!(the_seed_story, whatif_errors);

/// `h` as a native upload carries it: V2 compressed, base64.
fn base64_v2(h: &hdrhistogram::Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    hdrhistogram::serialization::Serializer::serialize(
        &mut hdrhistogram::serialization::V2DeflateSerializer::new(),
        h,
        &mut bytes,
    )
    .unwrap();
    base64::engine::general_purpose::STANDARD.encode(&bytes)
}

/// A native run may carry each segment's histogram (V2 compressed, base64, µs) or percentile
/// points; a histogram that does not decode is refused at its pointer and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_distributions() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    let mut t: Value = serde_json::from_str(budget_core::example::CHECKOUT_TOPOLOGY).unwrap();
    t["segments"][1]["pinned_timeout_ms"] = 100.into();
    app.apply_topology(&p.uploader, "checkout", &t.to_string())
        .await
        .expect(201);

    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for &(ms, n) in &INVENTORY {
        h.record_n(ms * 1000, n as u64).unwrap();
    }
    let hdr = base64_v2(&h);
    // One sample more than the segment's `samples`.
    h.record(1_000).unwrap();
    let other = base64_v2(&h);
    let run = |inventory: Value, payment: Value| {
        json!({"segments": [
            {"id": "order->inventory", "samples": 10000, "p99_ms": 180, "p999_ms": 420, "distribution": inventory},
            {"id": "order->payment", "samples": 10000, "p99_ms": 210, "p999_ms": 300, "distribution": payment},
            {"id": "order->user", "samples": 10000, "p99_ms": 8, "p999_ms": 20}
        ]})
    };
    let points = json!({"kind": "percentiles", "points": [
        {"percentile": 50, "us": 150000}, {"percentile": 99, "us": 210000},
        {"percentile": 99.9, "us": 300000}, {"percentile": 100, "us": 350000}
    ]});

    // Refused, with the pointer: not base64, not a histogram, points out of order.
    for (inventory, payment, pointer) in [
        (
            json!({"kind": "histogram", "hdr": "not base64!"}),
            points.clone(),
            "/segments/0/distribution/hdr",
        ),
        (
            json!({"kind": "histogram", "hdr": "aGVsbG8="}),
            points.clone(),
            "/segments/0/distribution/hdr",
        ),
        (
            json!({"kind": "histogram", "hdr": hdr}),
            json!({"kind": "percentiles", "points": [
            {"percentile": 99, "us": 2}, {"percentile": 50, "us": 3}]}),
            "/segments/1/distribution/points/1",
        ),
        (
            json!({"kind": "histogram"}),
            points.clone(),
            "/segments/0/distribution",
        ),
        // A histogram of other samples than the segment's (p99/p999 of another load test).
        (
            json!({"kind": "histogram", "hdr": other}),
            points.clone(),
            "/segments/0/distribution/hdr",
        ),
    ] {
        let e = app
            .upload(&p.uploader, "checkout", run(inventory, payment))
            .await
            .expect(422)
            .json();
        assert!(e.to_string().contains(pointer), "{pointer}: {e}");
    }
    let runs = app
        .get("/api/v1/chains/checkout/runs", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        runs["runs"].as_array().map(Vec::len),
        Some(0),
        "nothing stored: {runs}"
    );

    let up = app
        .upload(
            &p.uploader,
            "checkout",
            run(json!({"kind": "histogram", "hdr": hdr}), points),
        )
        .await
        .expect(201)
        .json();
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let doc = app.baseline(&id).await;
    assert_eq!(
        segment(&doc, "order->inventory")["kill_rate"].as_f64(),
        Some(0.25)
    );
    assert_eq!(kill_findings(&doc).len(), 1);
    // Percentile points bound the share, and give no finding: payment's 390 ms timeout is past
    // the slowest point (p100 350 ms).
    let pay = segment(&doc, "order->payment");
    assert_eq!(pay["kill_rate_bounds"], json!([0.0, 0.0]), "{pay}");
    assert!(pay.get("kill_rate").is_none());
    let w = whatif(&app, &id, "order->payment", 200).await;
    assert_eq!(
        (w["source"].as_str(), &w["kill_rate_bounds"]),
        (Some("percentiles"), &json!([0.01, 0.5]))
    );
    assert!(
        w["kill_rate"].is_null() && w["attempts_per_call"].is_null(),
        "{w}"
    );
    // User has no distribution: no kill fields.
    assert!(segment(&doc, "order->user")
        .get("kill_rate_bounds")
        .is_none());

    // The curve the console draws: ascending, ending at every sample.
    let d = app
        .get(
            &format!("/api/v1/baselines/{id}/distribution?segment=order->inventory"),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    let cdf = d["cdf"].as_array().unwrap();
    assert_eq!(cdf.len(), INVENTORY.len());
    assert_eq!(cdf.last().unwrap(), &json!([419.84, 1.0]));
    assert_eq!(
        cdf[0],
        json!([49.984, 0.75]),
        "50 ms sits in the bucket from 49.984 ms"
    );
    assert_eq!(
        (
            d["timeout_ms"].as_u64(),
            d["kill_rate"].as_f64(),
            d["samples"].as_u64()
        ),
        (Some(100), Some(0.25), Some(10_000))
    );
    app.stop().await;
}

/// A SQLite app with chain `checkout` on the labelled topology, and its two people.
async fn labelled_app() -> (TestApp, People) {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", &labelled_topology().to_string())
        .await
        .expect(201);
    (app, p)
}

/// Kill rates from the real JMeter and HdrHistogram fixtures equal the share of their raw
/// samples slower than the timeout, counted here from the files themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_fixtures_kill_what_their_samples_say() {
    let (app, p) = labelled_app().await;

    // JMeter: whole-ms `elapsed` per label, every row (failed ones too) a sample.
    let text = String::from_utf8(fixture("jmeter/shop_header.jtl")).unwrap();
    let mut by_label: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split(',').collect();
        by_label
            .entry(cols[2].to_owned())
            .or_default()
            .push(cols[1].parse().unwrap());
    }
    let up = upload_jtl(&app, &p.uploader, fixture("jmeter/shop_header.jtl")).await;
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let mut checked = 0;
    for (label, values) in &by_label {
        let seg = format!("order->{label}");
        let max = *values.iter().max().unwrap();
        for timeout in 1..=max + 1 {
            let w = whatif(&app, &id, &seg, timeout).await;
            assert_eq!(
                (w["killed"].as_u64(), w["samples"].as_u64()),
                (
                    Some(slower(values, timeout) as u64),
                    Some(values.len() as u64)
                ),
                "{seg} at {timeout} ms"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} timeouts checked");

    // HdrHistogram log (ns): every interval histogram decoded here with the library, values
    // converted to ms; timeouts with no sample within 0.2 % of them (the histograms' precision).
    let log = String::from_utf8(fixture("hdrhistogram/tagged.hlog")).unwrap();
    let mut samples: std::collections::BTreeMap<String, Vec<(f64, u64)>> = Default::default();
    for line in log.lines().filter(|l| l.starts_with("Tag=")) {
        let (tag, rest) = line.trim_start_matches("Tag=").split_once(',').unwrap();
        let encoded = rest.rsplit(',').next().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        let out = samples.entry(tag.to_owned()).or_default();
        for v in h.iter_recorded() {
            out.push((
                h.lowest_equivalent(v.value_iterated_to()) as f64 / 1e6,
                v.count_at_value(),
            ));
        }
    }
    let up = send(
        &app,
        &p.uploader,
        "checkout",
        &Upload::Raw {
            query: "?format=hdrhistogram&unit=ns",
            body: fixture("hdrhistogram/tagged.hlog"),
        },
    )
    .await
    .expect(201)
    .json();
    let id = up["baseline_id"]
        .as_str()
        .expect("a second run of other figures drifts")
        .to_owned();
    let mut checked = 0;
    for (tag, values) in &samples {
        let total: u64 = values.iter().map(|(_, n)| n).sum();
        for timeout in [1, 2, 3, 5, 8, 13, 20, 50, 100, 150, 200, 400, 800] {
            let t = timeout as f64;
            if values.iter().any(|(v, _)| (v - t).abs() <= t * 0.002) {
                continue;
            }
            let slower: u64 = values.iter().filter(|(v, _)| *v > t).map(|(_, n)| n).sum();
            let w = whatif(&app, &id, &format!("order->{tag}"), timeout).await;
            assert_eq!(
                (w["killed"].as_u64(), w["samples"].as_u64()),
                (Some(slower), Some(total)),
                "{tag} at {timeout} ms"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} timeouts checked");
    app.stop().await;
}

/// Locust's final JSON keeps its `response_times` histogram whole: what-if at every whole
/// millisecond equals the share of the file's own counts above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locust_json_response_times_are_the_distribution() {
    let (app, p) = labelled_app().await;
    let file: Value = serde_json::from_slice(&fixture("locust/shop.json")).unwrap();
    let up = send(
        &app,
        &p.uploader,
        "checkout",
        &Upload::Raw {
            query: "",
            body: fixture("locust/shop.json"),
        },
    )
    .await
    .expect(201)
    .json();
    assert_eq!(up["format"], "locust_json", "detected: {up}");
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let mut checked = 0;
    for entry in file.as_array().unwrap() {
        let counts: Vec<(f64, u64)> = entry["response_times"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(ms, n)| (ms.parse().unwrap(), n.as_u64().unwrap()))
            .collect();
        let total: u64 = counts.iter().map(|(_, n)| n).sum();
        let slowest = counts.iter().map(|(ms, _)| *ms as u64).max().unwrap();
        let seg = format!("order->{}", entry["name"].as_str().unwrap());
        for timeout in 1..=slowest + 1 {
            let slower: u64 = counts
                .iter()
                .filter(|(ms, _)| *ms > timeout as f64)
                .map(|(_, n)| n)
                .sum();
            let w = whatif(&app, &id, &seg, timeout).await;
            assert_eq!(
                (w["killed"].as_u64(), w["samples"].as_u64()),
                (Some(slower), Some(total)),
                "{seg} at {timeout} ms"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
    app.stop().await;
}
