//! The gRPC serve loop: HTTP/2 through h2, one task per connection.
//!
//! A connection's task accepts its requests, holds its Watch streams ([`Watches`]) and, when
//! the hub changes, sends every one of them its update in one pass; every other call (Ack,
//! Report, health, reflection) runs in a task of its own through tonic's routes
//! ([`pipe::serve_call`](super::pipe::serve_call)). The HTTP/2 settings are in [`Http2`]: what each costs per agent is
//! measured in docs/benchmarks.md.
//!
//! Keepalive pings every [`KEEPALIVE_INTERVAL`] close a connection whose peer does not answer
//! within [`KEEPALIVE_TIMEOUT`] while no stream is taken from it; one without a stream for
//! [`IDLE_WITHOUT_STREAMS`] is sent GOAWAY. At most `agents.max_connections` are held (a slot
//! is taken before accepting); a call is refused from its headers without an agent token
//! (`call`, [`open`]) and its request must arrive within a deadline. The bytes calls other
//! than Watch hold are bounded for the whole listener (`Budgets`). Stopping ends the Watch
//! streams (agents reconnect elsewhere), sends GOAWAY and lets calls in flight finish, for at
//! most [`DRAIN`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

use super::pipe::{serve_call, CallBytes, Charge, Shares};
use super::watch::{open, Opened, Watches};
use super::{Control, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_CONCURRENT_STREAMS};

/// The path of the Watch call, served by the connection's task.
pub const WATCH_PATH: &str = "/budget.v1.BudgetControl/Watch";
/// How long a stopping server lets calls in flight finish.
pub const DRAIN: Duration = Duration::from_secs(10);
/// Longest HTTP/2 handshake (the client's preface and settings).
const HANDSHAKE: Duration = Duration::from_secs(10);
/// A connection that has had no stream this long is closed (GOAWAY).
pub const IDLE_WITHOUT_STREAMS: Duration = Duration::from_secs(60);
/// How often a connection looks whether it has streams.
const IDLE_CHECK: Duration = Duration::from_secs(15);
/// The path prefix of the agents' service (Watch, Ack, Report).
const BUDGET_CONTROL: &str = "/budget.v1.BudgetControl/";
/// Longest a request other than Watch's (Ack, Report, health, reflection) may take to arrive,
/// from its headers to its end.
pub const CALL_REQUEST_WITHIN: Duration = Duration::from_secs(30);
/// Longest a call other than Watch may last, from its headers to the end of its answer: one
/// still running then is reset (a peer that does not take its answer, a health Watch).
pub const CALL_WITHIN: Duration = Duration::from_secs(40);
/// Bytes that health and reflection calls (no token needed) may hold at once, on all
/// connections together.
pub const OPEN_CALL_BYTES: usize = 4 << 20;
/// Bytes that calls not yet authenticated (every call, from its headers until its token is
/// looked at) may hold at once, on all connections together.
pub const OPENING_BYTES: usize = 64 << 20;

/// What calls may hold, on all connections together: every call from its headers until its
/// caller is known [`OPENING_BYTES`]; then Ack and Report calls `agents.max_call_bytes`,
/// health and reflection calls [`OPEN_CALL_BYTES`] (so callers without a token cannot take
/// the agents' part). A Watch is bounded by its token's streams once its caller is known.
#[derive(Clone)]
struct Budgets {
    opening: CallBytes,
    agents: CallBytes,
    /// Each agent token's share of `agents` ([`TOKEN_SHARE`] of it).
    shares: Shares,
    open: CallBytes,
}

/// The part of `agents.max_call_bytes` one agent token's calls may hold: a quarter, so one
/// token cannot take what the others' agents need.
pub const TOKEN_SHARE: usize = 4;

/// HTTP/2 settings of every gRPC connection.
#[derive(Debug, Clone, Copy)]
pub struct Http2 {
    /// Window of each stream the peer sends on (requests are small).
    pub stream_window: u32,
    /// Window of the whole connection the peer sends on.
    pub connection_window: u32,
    /// Data the server buffers per stream for the peer.
    pub max_send_buffer: usize,
    pub max_concurrent_streams: u32,
    /// Largest header list a request may carry.
    pub max_header_list: u32,
    /// Connections held at once (`agents.max_connections`).
    pub max_connections: usize,
    /// Bytes Ack and Report calls may hold at once (`agents.max_call_bytes`).
    pub max_call_bytes: usize,
}

impl Default for Http2 {
    fn default() -> Self {
        Self {
            stream_window: 64 * 1024,
            connection_window: 1024 * 1024,
            max_send_buffer: 64 * 1024,
            max_concurrent_streams: MAX_CONCURRENT_STREAMS,
            max_header_list: 8 * 1024,
            max_connections: 10_000,
            max_call_bytes: 256 << 20,
        }
    }
}

impl Http2 {
    fn builder(&self) -> h2::server::Builder {
        let mut b = h2::server::Builder::new();
        b.initial_window_size(self.stream_window)
            .initial_connection_window_size(self.connection_window)
            .max_send_buffer_size(self.max_send_buffer)
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list);
        b
    }
}

/// What every connection is served with, shared: each connection's task held clones of it
/// (368 bytes, held twice: by the spawned block and by the connection's future).
struct Served {
    routes: tonic::service::Routes,
    control: Control,
    budgets: Budgets,
    http2: Http2,
}

/// Serves every connection `incoming` gives until `stop` turns true, then drains them.
pub async fn serve<IO, E>(
    incoming: impl Stream<Item = Result<IO, E>> + Send + 'static,
    routes: tonic::service::Routes,
    control: Control,
    http2: Http2,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    E: std::fmt::Display,
{
    let routes = routes.prepare();
    // Each connection task holds a clone; when all are dropped, every connection has ended.
    let (alive, mut all_ended) = mpsc::channel::<()>(1);
    let mut incoming = Box::pin(incoming);
    let slots = Arc::new(Semaphore::new(http2.max_connections));
    let budgets = Budgets {
        opening: CallBytes::new(OPENING_BYTES, "calls not yet authenticated"),
        agents: CallBytes::new(
            http2.max_call_bytes,
            "Ack and Report calls (agents.max_call_bytes)",
        ),
        shares: Shares::new(
            http2.max_call_bytes / TOKEN_SHARE,
            "one agent token's Ack and Report calls (a quarter of agents.max_call_bytes)",
        ),
        open: CallBytes::new(OPEN_CALL_BYTES, "health and reflection calls"),
    };
    let served = Arc::new(Served {
        routes,
        control,
        budgets,
        http2,
    });
    loop {
        // A slot first: at the limit, nothing is accepted until a connection closes.
        let slot = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        let io = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            next = incoming.next() => match next {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "gRPC accept failed");
                    continue;
                }
                None => break,
            },
        };
        let (served, stop, alive) = (served.clone(), stop.clone(), alive.clone());
        tokio::spawn(async move {
            connection(io, served, stop).await;
            drop((alive, slot));
        });
    }
    // Closed at once: while the connections drain, an agent's new connection is refused (it
    // tries the next replica) instead of waiting in the listener's backlog until the exit.
    drop(incoming);
    drop(alive);
    let _ = tokio::time::timeout(DRAIN + Duration::from_secs(1), all_ended.recv()).await;
}

/// Serves one connection until it closes, or drains it once `stop` turns true.
async fn connection<IO>(io: IO, served: Arc<Served>, mut stop: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Boxed, and freed once done: held in this task's state, the handshake's future made it
    // about 1.7 KiB larger for the connection's whole life.
    let handshake = Box::pin(tokio::time::timeout(
        HANDSHAKE,
        served.http2.builder().handshake::<_, Bytes>(Unvectored(io)),
    ));
    let mut conn = match handshake.await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return tracing::debug!(error = %e, "HTTP/2 handshake failed"),
        Err(_) => return tracing::debug!("HTTP/2 handshake timed out"),
    };
    // Polled by this task rather than spawned: a task and a channel to say the peer is dead
    // took about 0.9 KiB of every connection.
    let pings = conn.ping_pong();
    // Streams taken from the connection: a keepalive ping not answered in time while they
    // grow is still behind them (`keepalive`).
    let taken = AtomicU32::new(0);
    let mut dead = std::pin::pin!(async {
        match pings {
            Some(pings) => keepalive(pings, &taken).await,
            None => std::future::pending().await,
        }
    });
    let Served {
        routes,
        control,
        budgets,
        ..
    } = &*served;
    let mut hub = control.hub.subscribe();
    let mut state = hub.borrow_and_update().clone();
    let mut watches = Watches::new(control.fleet.clone());
    // The Watch streams being opened, each by its own task, which returns it to be served
    // here (a channel took about 0.5 KiB of every connection; this set, empty, 0.2 KiB).
    let mut opening = FuturesUnordered::<JoinHandle<Option<Box<Opened>>>>::new();
    // A connection without a stream for IDLE_WITHOUT_STREAMS is sent GOAWAY (agents always
    // hold a Watch stream; one between reconnects comes back on a new connection).
    let mut idle_check =
        tokio::time::interval_at(tokio::time::Instant::now() + IDLE_CHECK, IDLE_CHECK);
    idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_since: Option<tokio::time::Instant> = None;
    // When the GOAWAY of an idle connection was sent: one not closed a check later is dropped
    // (a peer that does not answer the GOAWAY's ping holds it open otherwise).
    let mut goaway_at: Option<tokio::time::Instant> = None;
    let stopping = loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break true,
            _ = idle_check.tick() => {
                if goaway_at.is_some_and(|at| at.elapsed() >= IDLE_CHECK) {
                    tracing::debug!("idle gRPC connection not closed after its GOAWAY; dropping it");
                    break false;
                }
                if conn.has_streams() {
                    idle_since = None;
                } else {
                    let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                    if goaway_at.is_none() && since.elapsed() + IDLE_CHECK >= IDLE_WITHOUT_STREAMS {
                        tracing::debug!("gRPC connection without streams; closing");
                        conn.graceful_shutdown();
                        goaway_at = Some(tokio::time::Instant::now());
                    }
                }
            }
            // Each stream h2 decoded is taken, and charged or refused, without waiting: h2
            // decodes this connection's headers only while this task polls it, so across
            // connections the headers decoded and not yet taken are one connection's worth per
            // thread at most (tests/api/header_flood.rs). Nothing here may await.
            accepted = conn.accept() => match accepted {
                Some(Ok((req, mut respond))) => {
                    taken.fetch_add(1, Ordering::Relaxed);
                    match Charge::open(&budgets.opening, None, req.headers()) {
                        // Refused from its headers, which are dropped with it.
                        Err(status) => drop(respond.send_response(status.into_http::<()>(), true)),
                        Ok(charge) if req.uri().path() == WATCH_PATH => {
                            opening.push(tokio::spawn(open(control.clone(), req, respond, charge)));
                        }
                        Ok(charge) => {
                            let (routes, budgets) = (routes.clone(), budgets.clone());
                            tokio::spawn(call(control.clone(), routes, budgets, (req, respond), charge));
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "HTTP/2 connection failed");
                    break false;
                }
                None => break false,
            },
            Some(opened) = opening.next() => {
                if let Ok(Some(o)) = opened {
                    watches.add(*o, &hub.borrow().clone());
                }
            }
            Ok(()) = hub.changed() => {
                state = hub.borrow_and_update().clone();
                watches.deliver(&state);
            }
            _ = std::future::poll_fn(|cx| watches.poll_woken(cx, &state)) => {}
            _ = &mut dead => {
                tracing::debug!("gRPC peer did not answer a keepalive ping; closing");
                break false;
            }
        }
    };
    if !stopping {
        return;
    }
    watches.end_all();
    conn.graceful_shutdown();
    // Until the connection closes: a Watch still being accepted when the stop began (its
    // opener holds the stream open) is answered and ended like the others, asked for the same
    // spread; a request the peer sent after the GOAWAY is refused (clients retry those).
    let drain = async {
        loop {
            tokio::select! {
                accepted = conn.accept() => match accepted {
                    Some(Ok((_, mut respond))) => respond.send_reset(h2::Reason::REFUSED_STREAM),
                    Some(Err(_)) | None => break,
                },
                Some(opened) = opening.next() => {
                    if let Ok(Some(o)) = opened {
                        watches.add(*o, &state);
                        watches.end_all();
                    }
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN, drain).await;
}

/// Serves a call other than Watch. A call of `budget.v1.BudgetControl` (Ack, Report) is
/// refused from its headers unless it carries an agent token, before any of its request is
/// read; every request must arrive in full within [`CALL_REQUEST_WITHIN`], every call end
/// within [`CALL_WITHIN`]. The call holds its `opening` charge until its caller is known,
/// then is charged to its part of `budgets` until it ends, refused `RESOURCE_EXHAUSTED` when
/// that is full.
async fn call(
    control: Control,
    routes: tonic::service::Routes,
    budgets: Budgets,
    (mut req, mut respond): (
        http::Request<h2::RecvStream>,
        h2::server::SendResponse<Bytes>,
    ),
    opening: Charge,
) {
    let agents = req.uri().path().starts_with(BUDGET_CONTROL);
    // An agent call holds one of its token's places until it ends.
    let place = if agents {
        let caller = match control.agent_caller(req.headers()).await {
            Ok(principal) => control.take_call(&principal).map(|p| (principal, p)),
            Err(e) => Err(e),
        };
        match caller {
            // Kept for the handler, which does not look the token up again.
            Ok((principal, place)) => {
                let share = budgets.shares.of(&principal.token_id);
                req.extensions_mut().insert(principal);
                Some((place, share))
            }
            Err(e) => {
                let status = tonic::Status::from(e);
                let _ = respond.send_response(status.into_http::<()>(), true);
                return;
            }
        }
    } else {
        None
    };
    let budget = if agents {
        &budgets.agents
    } else {
        &budgets.open
    };
    let share = place.as_ref().map(|(_, share)| share);
    let charge = match Charge::open(budget, share, req.headers()) {
        Ok(charge) => charge,
        Err(status) => {
            let _ = respond.send_response(status.into_http::<()>(), true);
            return;
        }
    };
    drop(opening);
    if agents {
        // A Report charges what decoding made of its request, too.
        req.extensions_mut().insert(charge.clone());
    }
    let limits = (Some(CALL_REQUEST_WITHIN), CALL_WITHIN);
    // Ack and Report are unary: their request is one message.
    serve_call(routes, req, respond, limits, charge, agents).await;
    drop(place);
}

/// Pings the peer every [`KEEPALIVE_INTERVAL`]; ends when a ping cannot be sent, or is not
/// answered within [`KEEPALIVE_TIMEOUT`] while the connection took no stream (`taken`, counted
/// by the serve loop). A peer's answer is read after what it sent before it: a connection with
/// a backlog of header blocks still being decoded (up to 1,024 streams of 8 KiB, not flow
/// controlled) is read slower than its peer answers, and each stream taken from it is a whole
/// header block, so its peer is alive. A peer in the middle of a header block sends no stream
/// nor answer, and is closed.
async fn keepalive(mut pp: h2::PingPong, taken: &AtomicU32) {
    let mut tick = tokio::time::interval(KEEPALIVE_INTERVAL);
    // A ping answered late (past the next tick) is followed by the next one an interval later.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut ping = std::pin::pin!(pp.ping(h2::Ping::opaque()));
        loop {
            let before = taken.load(Ordering::Relaxed);
            match tokio::time::timeout(KEEPALIVE_TIMEOUT, ping.as_mut()).await {
                Ok(Ok(_)) => break,
                // Not answered yet, but the streams sent before the answer are still being
                // taken: wait on.
                Err(_) if taken.load(Ordering::Relaxed) != before => {}
                // A ping that cannot be sent (the connection is closing or broken) or is not
                // answered in time: the connection is of no more use.
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }
}

/// A connection that says it cannot write vectored, so that h2 copies a Watch update (a few
/// hundred bytes; h2 copies payloads up to 1 KiB then) into its write buffer: a publication
/// leaves in writes of up to 16 KiB, many streams' updates each, instead of one write per
/// stream (h2 sends a payload it keeps apart, over 256 bytes with vectored writes, alone).
struct Unvectored<IO>(IO);

impl<IO: AsyncRead + Unpin> AsyncRead for Unvectored<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Unvectored<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns (here: an async fn's future), without calling it.
    fn output_size<A, B, C, R>(_: impl FnOnce(A, B, C) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A connection's task holds h2's connection and little else for as long as the agent is
    /// connected: memory per agent (docs/benchmarks.md). Its handshake's future, kept in the
    /// task's state, and clones of what every connection shares made it 3,584 bytes, h2's
    /// 1,288 of them (debug build; 2,160 since).
    #[test]
    fn a_connections_task_keeps_little_besides_h2s_connection() {
        let h2 =
            std::mem::size_of::<h2::server::Connection<Unvectored<tokio::net::TcpStream>, Bytes>>();
        let task = output_size(connection::<tokio::net::TcpStream>);
        assert!(
            task <= h2 + 1536,
            "a connection's task takes {task} bytes, h2's connection {h2} of them"
        );
    }
}
