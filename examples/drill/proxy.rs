//! The fault proxy: a TCP proxy between a caller and one upstream (order → inventory,
//! order → payment) that adds latency or drops traffic on command — the network faults of the
//! handbook's incidents, below HTTP, so the services see what they would see in production.
//!
//! Faults (`POST /fault` on the control listener, JSON):
//! - `{"mode":"pass"}`: forward both ways;
//! - `{"mode":"delay","ms":400}`: hold every chunk the caller sends for that long before
//!   forwarding it ("库存接口 400ms");
//! - `{"mode":"drop"}`: reset every connection, new and open (UNAVAILABLE to the caller);
//! - `{"mode":"blackhole"}`: accept, then never forward nor answer, on new and open
//!   connections (a cut network: the caller waits for its own timeout — the R3 replay's
//!   "断下游网络").
//!
//! A connection closed by the caller (its attempt timed out) is closed upstream at once, with
//! whatever it still held: a request abandoned by its caller is never delivered late.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::services::{RoleSpec, READY};

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Fault {
    Pass,
    Delay { ms: u64 },
    Drop,
    Blackhole,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    reset: AtomicU64,
    blackholed: AtomicU64,
    chunks_forwarded: AtomicU64,
}

#[derive(Clone)]
struct Proxy {
    upstream: SocketAddr,
    fault: Arc<watch::Sender<Fault>>,
    counters: Arc<Counters>,
}

/// `GET /fault`: the fault in force and what the proxy did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultState {
    pub fault: Fault,
    pub connections: u64,
    pub reset: u64,
    pub blackholed: u64,
    pub chunks_forwarded: u64,
}

pub async fn serve(spec: RoleSpec) -> anyhow::Result<()> {
    let upstream = spec
        .upstream
        .ok_or_else(|| anyhow::anyhow!("the proxy needs an upstream"))?;
    let proxy = Proxy {
        upstream,
        fault: Arc::new(watch::channel(Fault::Pass).0),
        counters: Arc::default(),
    };
    let traffic = TcpListener::bind("127.0.0.1:0").await?;
    let control = TcpListener::bind("127.0.0.1:0").await?;
    let app = Router::new()
        .route("/fault", get(state).post(set))
        .with_state(proxy.clone());
    println!(
        "{READY} http://{} control=http://{}",
        traffic.local_addr()?,
        control.local_addr()?
    );
    tokio::spawn(async move { axum::serve(control, app).await });
    loop {
        let (client, _) = traffic.accept().await?;
        let _ = client.set_nodelay(true);
        proxy.counters.connections.fetch_add(1, Ordering::Relaxed);
        let proxy = proxy.clone();
        tokio::spawn(async move { proxy.pipe(client).await });
    }
}

async fn state(State(p): State<Proxy>) -> Json<FaultState> {
    let c = &p.counters;
    Json(FaultState {
        fault: *p.fault.borrow(),
        connections: c.connections.load(Ordering::Relaxed),
        reset: c.reset.load(Ordering::Relaxed),
        blackholed: c.blackholed.load(Ordering::Relaxed),
        chunks_forwarded: c.chunks_forwarded.load(Ordering::Relaxed),
    })
}

async fn set(State(p): State<Proxy>, Json(fault): Json<Fault>) -> Json<FaultState> {
    p.fault.send_replace(fault);
    state(State(p)).await
}

impl Proxy {
    fn reset(&self, socket: &TcpStream) {
        let _ = socket.set_zero_linger();
        self.counters.reset.fetch_add(1, Ordering::Relaxed);
    }

    async fn pipe(&self, mut client: TcpStream) {
        let mut fault = self.fault.subscribe();
        let now = *fault.borrow_and_update();
        match now {
            Fault::Drop => return self.reset(&client),
            Fault::Blackhole => return self.blackhole(client, fault).await,
            Fault::Pass | Fault::Delay { .. } => {}
        }
        let Ok(mut upstream) = TcpStream::connect(self.upstream).await else {
            return self.reset(&client);
        };
        let _ = upstream.set_nodelay(true);
        let (mut client_rd, mut client_wr) = client.split();
        let (mut up_rd, mut up_wr) = upstream.split();
        let mut from_client = vec![0u8; 16 * 1024];
        let mut from_upstream = vec![0u8; 16 * 1024];
        // Chunks from the caller, each with the time it may be forwarded.
        let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut black = false;
        loop {
            let due = held.front().map(|(at, _)| *at);
            tokio::select! {
                read = client_rd.read(&mut from_client) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) if black => {}
                    Ok(n) => {
                        let delay = match *fault.borrow() {
                            Fault::Delay { ms } => Duration::from_millis(ms),
                            _ => Duration::ZERO,
                        };
                        held.push_back((Instant::now() + delay, from_client[..n].to_vec()));
                    }
                },
                read = up_rd.read(&mut from_upstream), if !black => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if client_wr.write_all(&from_upstream[..n]).await.is_err() {
                            break;
                        }
                    }
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    if let Some((_, chunk)) = held.pop_front() {
                        if up_wr.write_all(&chunk).await.is_err() {
                            break;
                        }
                        self.counters.chunks_forwarded.fetch_add(1, Ordering::Relaxed);
                    }
                },
                changed = fault.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    match *fault.borrow_and_update() {
                        Fault::Drop => {
                            self.reset(client_rd.as_ref());
                            break;
                        }
                        Fault::Blackhole => {
                            if !black {
                                self.counters.blackholed.fetch_add(1, Ordering::Relaxed);
                            }
                            black = true;
                            held.clear();
                        }
                        // What a cut swallowed is gone: the connection cannot go on.
                        Fault::Pass | Fault::Delay { .. } if black => break,
                        Fault::Pass | Fault::Delay { .. } => {}
                    }
                }
            }
        }
    }

    /// Reads and discards what the caller sends; answers nothing, until the caller gives up
    /// or the fault changes (then the connection is reset).
    async fn blackhole(&self, mut client: TcpStream, mut fault: watch::Receiver<Fault>) {
        self.counters.blackholed.fetch_add(1, Ordering::Relaxed);
        let mut sink = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                read = client.read(&mut sink) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                changed = fault.changed() => {
                    if changed.is_err() || *fault.borrow_and_update() != Fault::Blackhole {
                        return self.reset(&client);
                    }
                }
            }
        }
    }
}
