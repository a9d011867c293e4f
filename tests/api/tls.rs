//! TLS on both listeners: HTTPS verified against a test CA, the real agent over TLS with
//! `ca_cert`, and a certificate replaced on disk reaching new connections without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use budget_agent::{Agent, AgentConfig, Source};
use budget_core::example::CHECKOUT_RUN_C;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

use crate::helpers::{draft_a, publish_run};
use crate::helpers::{spawn_app_on, Backend, TestApp, TestDb};

/// A test certificate authority.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self { params, key, pem }
    }

    /// A server certificate for 127.0.0.1 and localhost: (cert PEM, key PEM, cert DER).
    fn server_cert(&self, serial: u64) -> (String, String, CertificateDer<'static>) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "budgetd");
        params.serial_number = Some(SerialNumber::from(serial));
        params.not_before = rcgen::date_time_ymd(2024, 1, 1);
        params.not_after = rcgen::date_time_ymd(2090 + serial as i32, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params
            .signed_by(&key, &Issuer::from_params(&self.params, &self.key))
            .unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }
}

/// TLS files in a folder of their own, replaced in place by `write`.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(ca: &Ca) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), &ca.pem).unwrap();
        Self { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("server.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn write(&self, cert_pem: &str, key_pem: &str) {
        std::fs::write(self.cert(), cert_pem).unwrap();
        std::fs::write(self.key(), key_pem).unwrap();
    }
}

async fn spawn_tls_app(files: &Files, ca: &Ca) -> TestApp {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let (cert, key) = (files.cert(), files.key());
    let mut app = spawn_app_on(db, move |url| {
        let mut s = crate::helpers::settings_for(url);
        s.tls.cert_file = Some(cert);
        s.tls.key_file = Some(key);
        s.tls.reload_interval_secs = 1;
        s
    })
    .await;
    app.http = https_client(Some(ca));
    app
}

fn https_client(ca: Option<&Ca>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(Duration::from_secs(10));
    if let Some(ca) = ca {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// A fresh TLS connection to `port` trusting only `ca`: the leaf certificate the server
/// presented, and the ALPN protocol agreed.
async fn peer_cert(port: u16, ca: &Ca, alpn: &[u8]) -> (CertificateDer<'static>, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(budgetd::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (_, conn) = tls.get_ref();
    (
        conn.peer_certificates().unwrap()[0].clone().into_owned(),
        conn.alpn_protocol().map(<[u8]>::to_vec),
    )
}

fn agent_config(app: &TestApp, token: &str, id: &str, ca: Option<&Path>) -> AgentConfig {
    let mut c = AgentConfig::new(app.grpc_url(), token, id, "order");
    c.ca_cert = ca.map(Path::to_owned);
    c.connect_timeout = Duration::from_secs(2);
    c.first_config_timeout = Duration::from_secs(5);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_agent_over_tls_with_reload() {
    let ca = Ca::new("budgetd test CA");
    let files = Files::new(&ca);
    let (cert1, key1, der1) = ca.server_cert(1);
    files.write(&cert1, &key1);
    let app = spawn_tls_app(&files, &ca).await;
    assert!(app.url("/healthz").starts_with("https://"));

    // HTTPS: verified against the CA; refused without it; plaintext gets no answer.
    let ok = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let untrusted = https_client(None).get(app.url("/healthz")).send().await;
    let e = untrusted.expect_err("a server certificate from an unknown CA is refused");
    assert!(e.is_connect(), "{e:?}");
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", app.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    // Both listeners present the certificate, with ALPN h2 (gRPC) and http/1.1 (HTTP).
    let (leaf, alpn) = peer_cert(app.grpc_addr.port(), &ca, b"h2").await;
    assert_eq!((leaf, alpn.as_deref()), (der1.clone(), Some(&b"h2"[..])));
    let (leaf, alpn) = peer_cert(app.addr.port(), &ca, b"http/1.1").await;
    assert_eq!(
        (leaf, alpn.as_deref()),
        (der1.clone(), Some(&b"http/1.1"[..]))
    );

    // The real agent over TLS, trusting the CA file; publications approved over HTTPS.
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let a_id = draft_a(&app, &p).await;
    let rev_a = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let agent = Agent::start(agent_config(&app, &token, "order-tls", Some(&files.ca())))
        .await
        .unwrap();
    assert_eq!(
        (agent.source(), agent.revision()),
        (Source::ControlPlane, rev_a)
    );
    assert_eq!(
        agent.budget("order->payment"),
        Some(Duration::from_millis(390))
    );
    // Without the CA the agent does not trust the server (and has no cache to fall back on).
    let mut untrusting = agent_config(&app, &token, "order-untrusting", None);
    untrusting.first_config_timeout = Duration::from_secs(1);
    assert!(Agent::start(untrusting).await.is_err());

    // A new certificate (same CA, new serial and validity) replaces the files: new
    // connections on both listeners get it within a few reload intervals, no restart.
    let (cert2, key2, der2) = ca.server_cert(2);
    assert_ne!(der1, der2);
    files.write(&cert2, &key2);
    let mut seen = der1.clone();
    for _ in 0..100 {
        seen = peer_cert(app.addr.port(), &ca, b"http/1.1").await.0;
        if seen == der2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen == der2,
        "the HTTP listener did not pick up the new certificate"
    );
    assert_eq!(peer_cert(app.grpc_addr.port(), &ca, b"h2").await.0, der2);
    let ok = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(ok.status(), 200);

    // The agent's open connection carries on: it follows the next publication.
    let (_, rev_c) = publish_run(&app, &p, CHECKOUT_RUN_C).await;
    let mut rx = agent.subscribe();
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|s| s.revision == rev_c),
    )
    .await
    .expect("the agent follows a publication over TLS")
    .unwrap();
    // And a new agent connects with the reloaded certificate.
    let second = Agent::start(agent_config(&app, &token, "order-tls-2", Some(&files.ca())))
        .await
        .unwrap();
    assert_eq!(second.revision(), rev_c);
    second.shutdown();
    agent.shutdown();
    app.stop().await;
}

#[tokio::test]
async fn unusable_tls_files_stop_the_start_naming_the_file() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let ca = Ca::new("budgetd test CA");
    let files = Files::new(&ca);
    std::fs::write(files.cert(), "garbage").unwrap();
    let (_, key, _) = ca.server_cert(1);
    std::fs::write(files.key(), key).unwrap();
    let mut settings = crate::helpers::settings_for(&db.url);
    settings.tls.cert_file = Some(files.cert());
    settings.tls.key_file = Some(files.key());
    let e = budgetd::App::build(settings.clone()).await.err().unwrap();
    let e = format!("{e:#}");
    assert!(e.contains(&files.cert().display().to_string()), "{e}");

    // A key that is not the certificate's.
    let (cert, _, _) = ca.server_cert(2);
    std::fs::write(files.cert(), cert).unwrap();
    let e = format!(
        "{:#}",
        budgetd::App::build(settings.clone()).await.err().unwrap()
    );
    assert!(
        e.contains("does not match") && e.contains(&files.key().display().to_string()),
        "{e}"
    );

    settings.tls.key_file = Some(files.dir.path().join("missing.key"));
    let e = format!("{:#}", budgetd::App::build(settings).await.err().unwrap());
    assert!(e.contains("missing.key"), "{e}");
}
