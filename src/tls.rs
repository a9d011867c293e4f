//! TLS for both listeners: one rustls certificate resolver, loaded from PEM files and reloaded
//! when they change, behind one acceptor per listener (ALPN `h2` + `http/1.1` for HTTP, `h2`
//! for gRPC). Handshakes run concurrently, off the accept loop: the HTTP serve loop
//! (`http::serve`) runs each in its connection's task with [`Tls::http_acceptor`]; tonic gets
//! finished connections through [`Tls::grpc_incoming`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::anyhow;
use futures_util::Stream;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsSettings;

/// A connection once its TLS handshake is done.
pub type TlsConn = tokio_rustls::server::TlsStream<TcpStream>;

/// Longest a client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The one crypto provider budgetd's own TLS code uses (ring, like the agent's).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a certificate chain and its private key, both PEM; every error names the file.
pub fn load_certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> anyhow::Result<CertifiedKey> {
    let cert_pem = std::fs::read(cert_file).map_err(|e| {
        anyhow!(
            "cannot read the TLS certificate file {}: {e}",
            cert_file.display()
        )
    })?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            anyhow!(
                "the TLS certificate file {} is not valid PEM: {e}",
                cert_file.display()
            )
        })?;
    anyhow::ensure!(
        !certs.is_empty(),
        "the TLS certificate file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        cert_file.display()
    );
    let key_pem = std::fs::read(key_file)
        .map_err(|e| anyhow!("cannot read the TLS key file {}: {e}", key_file.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        pem::Error::NoItemsFound => anyhow!(
            "the TLS key file {} holds no PEM private key (-----BEGIN PRIVATE KEY-----)",
            key_file.display()
        ),
        e => anyhow!(
            "the TLS key file {} is not valid PEM: {e}",
            key_file.display()
        ),
    })?;
    let signing_key = provider.key_provider.load_private_key(key).map_err(|e| {
        anyhow!(
            "the TLS key file {} holds an unusable private key: {e}",
            key_file.display()
        )
    })?;
    let certified = CertifiedKey::new(certs, signing_key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(anyhow!(
            "the private key in {} does not match the certificate in {}",
            key_file.display(),
            cert_file.display()
        )),
        Err(e) => Err(anyhow!(
            "the TLS certificate file {} holds an invalid certificate: {e}",
            cert_file.display()
        )),
    }
}

/// The certificate every new handshake gets; swapped in place by [`Tls::reload`].
#[derive(Debug)]
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Resolver {
    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set(&self, key: CertifiedKey) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(key);
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// What a file looked like at the last check: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The server's TLS: certificate files, the shared resolver and one acceptor per listener.
pub struct Tls {
    cert_file: PathBuf,
    key_file: PathBuf,
    reload_interval: Duration,
    provider: Arc<CryptoProvider>,
    resolver: Arc<Resolver>,
    http: TlsAcceptor,
    grpc: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("reload_interval", &self.reload_interval)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// `None` when TLS is not configured; an error naming the file when a file is unusable,
    /// or when only one of `cert_file` / `key_file` is set.
    pub fn from_settings(settings: &TlsSettings) -> anyhow::Result<Option<Arc<Self>>> {
        let (cert_file, key_file) = match (&settings.cert_file, &settings.key_file) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c.clone(), k.clone()),
            (Some(_), None) => anyhow::bail!("tls.cert_file is set but tls.key_file is not"),
            (None, Some(_)) => anyhow::bail!("tls.key_file is set but tls.cert_file is not"),
        };
        let provider = provider();
        let key = load_certified_key(&cert_file, &key_file, &provider)?;
        let resolver = Arc::new(Resolver {
            current: RwLock::new(Arc::new(key)),
        });
        let acceptor = |alpn: &[&[u8]]| -> anyhow::Result<TlsAcceptor> {
            let mut config = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| anyhow!("TLS configuration: {e}"))?
                .with_no_client_auth()
                .with_cert_resolver(resolver.clone());
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(TlsAcceptor::from(Arc::new(config)))
        };
        let http = acceptor(&[b"h2", b"http/1.1"])?;
        let grpc = acceptor(&[b"h2"])?;
        Ok(Some(Arc::new(Self {
            cert_file,
            key_file,
            reload_interval: Duration::from_secs(settings.reload_interval_secs),
            provider,
            resolver,
            http,
            grpc,
        })))
    }

    /// The certificate chain new handshakes get (leaf first).
    pub fn current_chain(&self) -> Vec<CertificateDer<'static>> {
        self.resolver.get().cert.clone()
    }

    /// Reads both files again and, when they are a valid pair, serves them to new
    /// connections; on error the previous certificate stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let key = load_certified_key(&self.cert_file, &self.key_file, &self.provider)?;
        self.resolver.set(key);
        Ok(())
    }

    fn stamps(&self) -> (Stamp, Stamp) {
        (stamp(&self.cert_file), stamp(&self.key_file))
    }

    /// Checks the files' modification time and length every `reload_interval` and reloads
    /// when either changed (a pair caught half-written fails to load and is retried at the
    /// next change). `None` when `reload_interval_secs` is 0.
    pub fn spawn_reloader(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        if self.reload_interval.is_zero() {
            return None;
        }
        let tls = self.clone();
        Some(tokio::spawn(async move {
            let mut seen = tls.stamps();
            let mut tick = tokio::time::interval(tls.reload_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let now = tls.stamps();
                if now == seen {
                    continue;
                }
                seen = now;
                match tls.reload() {
                    Ok(()) => tracing::info!(
                        cert_file = %tls.cert_file.display(),
                        "reloaded the TLS certificate; new connections use it"
                    ),
                    Err(e) => tracing::warn!(
                        error = %format!("{e:#}"),
                        "TLS files changed but cannot be loaded; keeping the previous certificate"
                    ),
                }
            }
        }))
    }

    /// The HTTP acceptor (ALPN h2 or http/1.1); the serve loop runs each handshake, within
    /// [`HANDSHAKE_TIMEOUT`], in the task of a connection that already holds a slot of the
    /// connection limit.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        self.http.clone()
    }

    /// The gRPC listener: TLS connections (ALPN h2) for tonic's `serve_with_incoming*`.
    pub fn grpc_incoming(
        &self,
        listener: TcpListener,
    ) -> impl Stream<Item = Result<TlsConn, std::io::Error>> + Send + 'static {
        let rx = accept_tls(listener, self.grpc.clone());
        futures_util::stream::unfold(rx, |mut rx| async move {
            let (conn, _) = rx.recv().await?;
            Some((Ok(conn), rx))
        })
    }
}

/// What a listener's `accept` gave, for both accept loops: the connection, with Nagle's delay
/// off; `None` after a failed accept (e.g. too many open files), once a short pause has passed
/// so that the loop does not spin.
pub(crate) async fn accepted_tcp(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
) -> Option<(TcpStream, SocketAddr)> {
    let (tcp, peer) = match accepted {
        Ok(accepted) => accepted,
        Err(e) => {
            tracing::debug!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            return None;
        }
    };
    // Publications are small writes that must leave at once: no Nagle delay.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "failed to set TCP_NODELAY");
    }
    Some((tcp, peer))
}

/// Accepts TCP connections and runs each handshake in a task of its own, so a slow or
/// silent client never holds up the others. Ends when the receiver is dropped (the server
/// stopped), which closes the listening socket.
fn accept_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
) -> mpsc::Receiver<(TlsConn, SocketAddr)> {
    let (tx, rx) = mpsc::channel::<(TlsConn, SocketAddr)>(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let Some((tcp, peer)) = accepted_tcp(accepted).await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(conn)) => {
                        let _ = tx.send((conn, peer)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(cert: &Path, key: &Path) -> TlsSettings {
        TlsSettings {
            cert_file: Some(cert.to_owned()),
            key_file: Some(key.to_owned()),
            ..TlsSettings::default()
        }
    }

    fn err(s: &TlsSettings) -> String {
        format!("{:#}", Tls::from_settings(s).unwrap_err())
    }

    #[test]
    fn unusable_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("server.crt");
        let key = dir.path().join("server.key");

        let e = err(&settings(&cert, &key));
        assert!(e.contains("server.crt") && e.contains("cannot read"), "{e}");

        std::fs::write(&cert, "not a certificate").unwrap();
        std::fs::write(&key, "not a key").unwrap();
        let e = err(&settings(&cert, &key));
        assert!(
            e.contains("server.crt") && e.contains("no PEM certificate"),
            "{e}"
        );

        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = err(&settings(&cert, &key));
        assert!(
            e.contains("server.key") && e.contains("no PEM private key"),
            "{e}"
        );

        let only_cert = TlsSettings {
            cert_file: Some(cert.clone()),
            ..TlsSettings::default()
        };
        assert!(err(&only_cert).contains("tls.key_file"));
        assert!(Tls::from_settings(&TlsSettings::default())
            .unwrap()
            .is_none());
    }
}
