//! The HTTP serve loop: hyper-util's auto connection builder (HTTP/1.1 and HTTP/2, plain TCP or
//! TLS) with the bounds of SPEC §7 — a connection limit and header-read, idle, body-read and
//! request timeouts — and a graceful stop that lets in-flight requests finish.
//!
//! What each bound covers (settings in [`HttpLimits`]):
//! - `max_connections`: a semaphore slot is taken *before* `accept`, so at the limit budgetd
//!   stops accepting and new clients wait in the kernel's listen backlog until a connection
//!   closes. TLS handshakes hold a slot too.
//! - `header_read_timeout_secs`: hyper's HTTP/1 `header_read_timeout`. In hyper 1.x (1.12 in
//!   Cargo.lock) the timer also runs while a kept-alive connection waits for its next request
//!   (`proto::h1::conn::State::idle` re-arms it as soon as a response is written), so it is
//!   HTTP/1's keep-alive timeout as well. Before hyper has a connection at all (it reads the
//!   first bytes to tell HTTP/1 from HTTP/2), and for an HTTP/2 connection that never opens a
//!   stream, `Activity` applies the same deadline to the first request: the connection is
//!   dropped then.
//! - `idle_timeout_secs`: `Activity` counts the requests in flight on a connection (until
//!   their response body is written or dropped); a connection with none for this long is shut
//!   down gracefully (HTTP/2: GOAWAY). HTTP/2 keep-alive pings additionally close a connection
//!   whose peer stopped answering. A connection with an answer that has not handed out a part
//!   of its body (16 KiB at most) for this long is dropped (a peer that does not read, or that opens
//!   no HTTP/2 flow-control window while it answers pings), and so is one still open
//!   [`CLOSE_GRACE`] after a graceful shutdown and the end of its last request (an answer stuck
//!   in its write buffer).
//! - `body_read_timeout_secs`: every request body is a [`ReadTimeout`]: when the server has
//!   waited this long for its next frame, reading it fails and the request is aborted. Uploads
//!   of any size keep going as long as bytes keep arriving.
//! - `request_timeout_secs`: a total deadline for a request's handler (body read included),
//!   answered 503; not applied to the routes in [`UNTIMED`] (load-test uploads stream
//!   gigabytes; archive verification reads every object).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::ensure;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS};
use axum::http::{HeaderValue, Method};
use axum::middleware::{self as mw, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::read_timeout::ReadTimeout;
use crate::config::HttpLimits;
use crate::error::{ApiError, Code};

/// Routes without a total request timeout (method, route template): load-test uploads stream
/// gigabytes (bounded by `body_read_timeout_secs` and `max_upload_bytes` instead) and archive
/// verification reads every archived object (admin only).
pub const UNTIMED: [(Method, &str); 2] = [
    (Method::POST, "/api/v1/chains/{chain}/runs"),
    (Method::GET, "/api/v1/archive/verify"),
];

/// HTTP/1 read buffer: the largest request head accepted (hyper's default is ~400 KiB), and
/// what one connection can make the server hold before a handler reads.
const H1_MAX_BUF: usize = 64 * 1024;
/// HTTP/2 flow-control windows: the most request body a client can push ahead of the handler
/// on one stream and on one connection (hyper's defaults are 1 MiB each).
const H2_STREAM_WINDOW: u32 = 64 * 1024;
const H2_CONNECTION_WINDOW: u32 = 128 * 1024;
/// HTTP/2 request headers, decoded, per stream.
const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// HTTP/2 keep-alive: ping an idle connection this often and drop it when a ping goes
/// unanswered this long (a peer that vanished without closing).
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection shut down gracefully (idle, or the server stopping) may take to close
/// once nothing is in flight on it: an answer still being written to a peer that does not read
/// it is dropped then.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// [`HttpLimits`] checked and in the units the serve loop uses.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_concurrent_streams: u32,
}

impl Limits {
    /// Every limit must be set: 0 is refused rather than read as "unbounded".
    pub fn from_settings(s: &HttpLimits) -> anyhow::Result<Self> {
        ensure!(
            (1..=1_000_000).contains(&s.max_connections),
            "http_limits.max_connections must be between 1 and 1000000, not {}",
            s.max_connections
        );
        for (name, secs) in [
            ("header_read_timeout_secs", s.header_read_timeout_secs),
            ("idle_timeout_secs", s.idle_timeout_secs),
            ("body_read_timeout_secs", s.body_read_timeout_secs),
            ("request_timeout_secs", s.request_timeout_secs),
        ] {
            ensure!(
                (1..=86_400).contains(&secs),
                "http_limits.{name} must be between 1 and 86400 seconds, not {secs}"
            );
        }
        ensure!(
            s.max_concurrent_streams >= 1,
            "http_limits.max_concurrent_streams must be at least 1"
        );
        Ok(Self {
            max_connections: s.max_connections,
            header_read_timeout: Duration::from_secs(s.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(s.idle_timeout_secs),
            body_read_timeout: Duration::from_secs(s.body_read_timeout_secs),
            request_timeout: Duration::from_secs(s.request_timeout_secs),
            max_concurrent_streams: s.max_concurrent_streams,
        })
    }
}

/// Serves `router` on `listener` (TLS when `tls` is set) within `limits` until `shutdown`
/// resolves; then stops accepting, lets in-flight requests finish (kept-alive HTTP/1
/// connections close, HTTP/2 ones get GOAWAY) and returns once every connection has closed.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let router = router.layer(mw::from_fn_with_state(
        limits.request_timeout,
        request_timeout,
    ));
    let builder = builder(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // A slot first: at the limit, nothing is accepted until a connection closes.
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let Some((tcp, peer)) = crate::tls::accepted_tcp(accepted).await else {
            continue;
        };
        let conn = Conn {
            builder: builder.clone(),
            router: router.clone(),
            limits: limits.clone(),
            stop: stop_rx.clone(),
            _slot: slot,
        };
        match &tls {
            None => {
                tokio::spawn(conn.run(tcp));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let handshake = acceptor.accept(tcp);
                    match tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => conn.run(stream).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds its slot until it has closed: all slots back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(H1_MAX_BUF);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(H2_MAX_HEADER_LIST)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW);
    builder
}

/// One accepted connection and what it needs to be served.
struct Conn {
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    limits: Limits,
    stop: watch::Receiver<bool>,
    /// Returned to the connection limit when the connection has closed.
    _slot: OwnedSemaphorePermit,
}

impl Conn {
    async fn run<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let service = TowerToHyperService::new(ConnService {
            router: self.router,
            body_read_timeout: self.limits.body_read_timeout,
            activity: activity.clone(),
        });
        let conn = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut stop = self.stop;
        // Since when the connection has been shutting down gracefully.
        let mut closing: Option<Instant> = None;
        loop {
            let check = activity.next_check(&self.limits, closing);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "HTTP connection ended with an error");
                    }
                    break;
                }
                () = async { let _ = stop.wait_for(|stop| *stop).await; }, if closing.is_none() => {
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
                () = tokio::time::sleep_until(check) => match activity.due(&self.limits, closing) {
                    Due::Nothing => {}
                    Due::Idle => {
                        tracing::debug!("closing an idle HTTP connection");
                        conn.as_mut().graceful_shutdown();
                        closing = Some(Instant::now());
                    }
                    Due::Drop(why) => {
                        tracing::debug!(why, "dropping an HTTP connection");
                        break;
                    }
                },
            }
        }
    }
}

/// What a connection's check finds due.
enum Due {
    Nothing,
    /// Shut it down gracefully: nothing in flight for the idle timeout.
    Idle,
    /// Drop it now (its socket is closed), for this reason.
    Drop(&'static str),
}

/// Requests in flight on one connection, since when it has had none, and whether its answers
/// are being taken.
struct Activity {
    opened: Instant,
    /// A request has arrived on this connection.
    served: AtomicBool,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// Answers whose body has not been handed out whole (or dropped) yet, each with when it
    /// began or last handed out a part of its body (at most [`PART`]).
    answering: Mutex<Answers>,
}

/// A connection's answers being written, by a number of their own.
#[derive(Default)]
struct Answers {
    next: u64,
    moved: HashMap<u64, Instant>,
}

fn at(time: &Mutex<Instant>) -> Instant {
    *time.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn set(time: &Mutex<Instant>) {
    *time.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Instant::now();
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            opened: now,
            served: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            answering: Mutex::default(),
        }
    }

    /// When the connection may next be due for something ([`Activity::due`]).
    fn next_check(&self, limits: &Limits, closing: Option<Instant>) -> Instant {
        let mut next = Instant::now() + limits.idle_timeout;
        if !self.served.load(Ordering::SeqCst) {
            next = next.min(self.opened + limits.header_read_timeout);
        }
        if let Some(stalled) = self.stalled_since() {
            next = next.min(stalled + limits.idle_timeout);
        }
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            match closing {
                Some(since) => next = next.min(since.max(at(&self.idle_since)) + CLOSE_GRACE),
                None if self.served.load(Ordering::SeqCst) => {
                    next = next.min(at(&self.idle_since) + limits.idle_timeout);
                }
                None => {}
            }
        }
        // Never a deadline already past: a check finds nothing due until something changes.
        next.max(Instant::now() + Duration::from_millis(10))
    }

    /// When the answer that has gone longest without handing out a part of its body last did
    /// (or began).
    fn stalled_since(&self) -> Option<Instant> {
        let answers = self
            .answering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        answers.moved.values().min().copied()
    }

    /// Dropped: no first request within the header-read timeout; an answer that has not moved
    /// for the idle timeout, whatever the others do (a peer that does not take it: an HTTP/2
    /// peer that opens no flow-control window answers pings all the same); or shut down
    /// gracefully [`CLOSE_GRACE`] ago, and as long since its last request ended (an answer
    /// stuck in the write buffer). Shut down gracefully: nothing in flight for the idle timeout.
    fn due(&self, limits: &Limits, closing: Option<Instant>) -> Due {
        let in_flight = self.in_flight.load(Ordering::SeqCst);
        if !self.served.load(Ordering::SeqCst)
            && self.opened.elapsed() >= limits.header_read_timeout
        {
            return Due::Drop("no request within the header-read timeout");
        }
        if self
            .stalled_since()
            .is_some_and(|since| since.elapsed() >= limits.idle_timeout)
        {
            return Due::Drop("an answer was not taken for the idle timeout");
        }
        match closing {
            // The grace runs from the later of the shutdown and the end of the last request.
            Some(since)
                if in_flight == 0 && since.max(at(&self.idle_since)).elapsed() >= CLOSE_GRACE =>
            {
                Due::Drop("still open after its graceful shutdown")
            }
            None if self.served.load(Ordering::SeqCst)
                && in_flight == 0
                && at(&self.idle_since).elapsed() >= limits.idle_timeout =>
            {
                Due::Idle
            }
            _ => Due::Nothing,
        }
    }
}

/// One request in flight; dropped with its response body (written out, or abandoned).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.served.store(true, Ordering::SeqCst);
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // The time first, so a check that sees no request in flight never sees an old time.
        set(&self.0.idle_since);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The router as one connection's service: the request body gets the body-read timeout, the
/// response body carries the request's [`InFlight`] until it is written or dropped.
#[derive(Clone)]
struct ConnService {
    router: Router,
    body_read_timeout: Duration,
    activity: Arc<Activity>,
}

impl tower::Service<hyper::Request<Incoming>> for ConnService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        let timeout = self.body_read_timeout;
        let req = req.map(|body| Body::new(ReadTimeout::new(body, timeout)));
        let response = self.router.clone().oneshot(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Body::new(Tracked::new(body, in_flight))))
        })
    }
}

/// The most of an answer's body handed to hyper at once: hyper takes the next part only as its
/// peer takes what it has (HTTP/1: its write buffer; HTTP/2: the stream's flow-control
/// window), so an answer's progress is seen part by part, and a peer that takes nothing holds
/// no more than a part in hyper's buffers.
const PART: usize = 16 * 1024;

/// A response body holding its request's [`InFlight`], counted as an answer of its
/// connection that moves when a part of it is handed out ([`PART`] at most).
struct Tracked {
    body: Body,
    /// What is left of a data frame larger than [`PART`].
    rest: Bytes,
    in_flight: InFlight,
    /// Its number among the connection's [`Answers`].
    id: u64,
}

impl Tracked {
    fn new(body: Body, in_flight: InFlight) -> Self {
        let id = {
            let mut answers = in_flight
                .0
                .answering
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let id = answers.next;
            answers.next += 1;
            answers.moved.insert(id, Instant::now());
            id
        };
        Self {
            body,
            rest: Bytes::new(),
            in_flight,
            id,
        }
    }

    fn moved(&self) {
        let mut answers = self
            .in_flight
            .0
            .answering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        answers.moved.insert(self.id, Instant::now());
    }

    /// The next part of `data`, keeping the rest for the next poll.
    fn part(&mut self, mut data: Bytes) -> Frame<Bytes> {
        if data.len() > PART {
            self.rest = data.split_off(PART);
        }
        self.moved();
        Frame::data(data)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut answers = self
            .in_flight
            .0
            .answering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        answers.moved.remove(&self.id);
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if !self.rest.is_empty() {
            let rest = std::mem::take(&mut self.rest);
            return Poll::Ready(Some(Ok(self.part(rest))));
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => Poll::Ready(Some(Ok(self.part(data)))),
                Err(frame) => {
                    self.moved();
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// The total deadline of a request, except on [`UNTIMED`] routes.
async fn request_timeout(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let untimed = req.extensions().get::<MatchedPath>().is_some_and(|route| {
        UNTIMED
            .iter()
            .any(|(method, path)| req.method() == method && route.as_str() == *path)
    });
    if untimed {
        return next.run(req).await;
    }
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            let mut response = ApiError::new(
                Code::Unavailable,
                format!(
                    "the request took longer than {} s and was abandoned",
                    limit.as_secs()
                ),
            )
            .into_response();
            // Outside the router's own layers: the same headers every response carries.
            let headers = response.headers_mut();
            headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
            headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            response
        }
    }
}
