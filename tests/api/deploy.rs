//! The deployment manifests keep their invariants: deploy/k8s/*.yaml, deploy/compose.yaml and
//! deploy/Dockerfile are parsed (YAML with serde_yaml_ng) and checked, so CI catches a manifest
//! that would drop a replica, a probe, the disruption budget or a port.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml_ng::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every document of every deploy/k8s/*.yaml file.
fn k8s_objects() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join("k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no deploy/k8s/*.yaml");
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", file.display()));
            if !value.is_null() {
                objects.push(value);
            }
        }
    }
    objects
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn of_kind<'a>(objects: &'a [Value], k: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind(o) == k).collect()
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map_or(&[], Vec::as_slice)
}

#[test]
fn kubernetes_manifests_keep_their_invariants() {
    let objects = k8s_objects();
    let deployments = of_kind(&objects, "Deployment");
    assert_eq!(deployments.len(), 1, "one budgetd Deployment");
    let d = deployments[0];
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    assert!(replicas >= 2, "Deployment replicas {replicas} < 2");
    let labels = &d["spec"]["selector"]["matchLabels"];
    assert!(labels.as_mapping().is_some_and(|m| !m.is_empty()));
    assert_eq!(
        &d["spec"]["template"]["metadata"]["labels"], labels,
        "the pod template carries the selector's labels"
    );
    let pod = &d["spec"]["template"]["spec"];
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
    assert!(
        grace >= 30,
        "terminationGracePeriodSeconds {grace} < 30: Watch streams need time to move"
    );

    let containers = seq(&pod["containers"]);
    let c = containers
        .iter()
        .find(|c| c["name"] == "budgetd")
        .expect("a budgetd container");
    // Probes: readiness /readyz, liveness /healthz, on a declared port.
    let port_names: BTreeSet<&str> = seq(&c["ports"])
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let container_ports: BTreeSet<i64> = seq(&c["ports"])
        .iter()
        .filter_map(|p| p["containerPort"].as_i64())
        .collect();
    assert_eq!(container_ports, BTreeSet::from([8080, 50051]));
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        let port_ok = match &get["port"] {
            Value::String(p) => port_names.contains(p.as_str()),
            Value::Number(n) => n.as_i64() == Some(8080),
            _ => false,
        };
        assert!(port_ok, "{probe} targets the HTTP port");
    }
    let requests = &c["resources"]["requests"];
    assert!(
        requests["cpu"].as_str().is_some() && requests["memory"].as_str().is_some(),
        "resource requests (cpu and memory) are set: {requests:?}"
    );

    // The ConfigMap and the Secret the Deployment uses exist.
    let configmaps: BTreeSet<&str> = of_kind(&objects, "ConfigMap")
        .into_iter()
        .map(name)
        .collect();
    let secrets: BTreeSet<&str> = of_kind(&objects, "Secret").into_iter().map(name).collect();
    let used_configmaps: BTreeSet<&str> = seq(&pod["volumes"])
        .iter()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .chain(
            seq(&c["envFrom"])
                .iter()
                .filter_map(|e| e["configMapRef"]["name"].as_str()),
        )
        .collect();
    let used_secrets: BTreeSet<&str> = seq(&c["envFrom"])
        .iter()
        .filter_map(|e| e["secretRef"]["name"].as_str())
        .chain(
            seq(&pod["volumes"])
                .iter()
                .filter_map(|v| v["secret"]["secretName"].as_str()),
        )
        .collect();
    assert!(
        !used_configmaps.is_empty(),
        "the Deployment uses a ConfigMap"
    );
    assert!(!used_secrets.is_empty(), "the Deployment uses a Secret");
    assert!(
        used_configmaps.is_subset(&configmaps),
        "{used_configmaps:?} ⊄ {configmaps:?}"
    );
    assert!(
        used_secrets.is_subset(&secrets),
        "{used_secrets:?} ⊄ {secrets:?}"
    );

    // A PodDisruptionBudget over the same pods.
    let pdbs = of_kind(&objects, "PodDisruptionBudget");
    assert!(
        pdbs.iter()
            .any(|p| &p["spec"]["selector"]["matchLabels"] == labels),
        "a PodDisruptionBudget selects {labels:?}"
    );

    // Services for 8080 and 50051 selecting the pods.
    let mut service_ports = BTreeSet::new();
    for s in of_kind(&objects, "Service") {
        let selector = s["spec"]["selector"].as_mapping().unwrap();
        let pods = labels.as_mapping().unwrap();
        assert!(
            selector.iter().all(|(k, v)| pods.get(k) == Some(v)),
            "Service {} selects the budgetd pods",
            name(s)
        );
        service_ports.extend(
            seq(&s["spec"]["ports"])
                .iter()
                .filter_map(|p| p["port"].as_i64()),
        );
    }
    assert!(
        service_ports.is_superset(&BTreeSet::from([8080, 50051])),
        "{service_ports:?}"
    );
}

#[test]
fn compose_file_keeps_its_invariants() {
    let text = std::fs::read_to_string(deploy_dir().join("compose.yaml")).unwrap();
    let mut compose: Value = serde_yaml_ng::from_str(&text).unwrap();
    compose.apply_merge().unwrap(); // `<<: *budgetd`
    let services = compose["services"].as_mapping().expect("services");
    let image = |s: &Value| s["image"].as_str().unwrap_or_default().to_owned();
    let env = |s: &Value, key: &str| -> Option<String> {
        match &s["environment"] {
            Value::Mapping(m) => m.get(key).and_then(Value::as_str).map(str::to_owned),
            Value::Sequence(list) => list.iter().filter_map(Value::as_str).find_map(|kv| {
                kv.split_once('=')
                    .filter(|(k, _)| *k == key)
                    .map(|(_, v)| v.to_owned())
            }),
            _ => None,
        }
    };

    // Two budgetd replicas, each with its own BUDGETD_REPLICA.
    let budgetd: Vec<&Value> = services
        .values()
        .filter(|s| {
            s["build"]["dockerfile"]
                .as_str()
                .is_some_and(|d| d.ends_with("Dockerfile"))
                || image(s).contains("budgetd")
        })
        .collect();
    assert_eq!(budgetd.len(), 2, "two budgetd services");
    let replicas: BTreeSet<String> = budgetd
        .iter()
        .map(|s| env(s, "BUDGETD_REPLICA").expect("BUDGETD_REPLICA set"))
        .collect();
    assert_eq!(replicas.len(), 2, "distinct BUDGETD_REPLICA: {replicas:?}");
    for s in &budgetd {
        let db = env(s, "BUDGETD_DATABASE_URL").unwrap_or_default();
        assert!(db.starts_with("postgres://"), "replicas share PostgreSQL");
        let archive = env(s, "BUDGETD_ARCHIVE_URL").unwrap_or_default();
        assert!(
            archive.starts_with("s3://"),
            "replicas share the S3 archive"
        );
    }

    // PostgreSQL and MinIO, and a one-shot that creates the bucket.
    assert!(services.values().any(|s| image(s).starts_with("postgres")));
    assert!(services
        .values()
        .any(|s| image(s).starts_with("minio/minio")));
    let bucket_setup = services
        .iter()
        .find(|(_, s)| {
            serde_yaml_ng::to_string(&s["command"])
                .unwrap()
                .contains("mc mb")
        })
        .map(|(k, _)| k.as_str().unwrap().to_owned())
        .expect("a service creating the bucket (mc mb)");
    for s in &budgetd {
        assert_eq!(
            s["depends_on"][bucket_setup.as_str()]["condition"].as_str(),
            Some("service_completed_successfully"),
            "budgetd starts after the bucket exists"
        );
    }

    // A load balancer publishing 8080 and 50051.
    let lb_ports: BTreeSet<String> = services
        .values()
        .filter(|s| image(s).starts_with("nginx") || image(s).contains("envoy"))
        .flat_map(|s| seq(&s["ports"]).to_vec())
        .filter_map(|p| match p {
            Value::String(s) => Some(s.rsplit(':').next().unwrap().to_owned()),
            Value::Number(n) => Some(n.to_string()),
            Value::Mapping(m) => m
                .get("target")
                .and_then(Value::as_i64)
                .map(|t| t.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        lb_ports.contains("8080") && lb_ports.contains("50051"),
        "the load balancer exposes 8080 and 50051: {lb_ports:?}"
    );
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_healthcheck() {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let instructions: Vec<(String, String)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (op, rest) = l.split_once(char::is_whitespace)?;
            Some((op.to_ascii_uppercase(), rest.trim().to_owned()))
        })
        .collect();
    let from = instructions.iter().filter(|(op, _)| op == "FROM").count();
    assert!(from >= 2, "multi-stage build: {from} FROM");
    assert!(
        instructions
            .iter()
            .any(|(op, rest)| op == "COPY" && rest.starts_with("--from=")),
        "the runtime stage copies from the build stage"
    );
    let user = instructions
        .iter()
        .rev()
        .find(|(op, _)| op == "USER")
        .map(|(_, u)| u.clone())
        .expect("a USER instruction");
    assert!(
        user != "root" && user != "0" && !user.starts_with("0:"),
        "runs as non-root, not {user}"
    );
    assert!(
        instructions
            .iter()
            .any(|(op, rest)| op == "HEALTHCHECK" && !rest.starts_with("NONE")),
        "a HEALTHCHECK"
    );
}
