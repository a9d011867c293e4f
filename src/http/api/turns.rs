//! The turns of load-tool uploads: at most [`UPLOADS_AT_ONCE`] are read at once,
//! [`UPLOADS_PER_TOKEN`] per token, and while another waits for a turn, one that holds a turn
//! must keep moving ([`MIN_PACE`]) or lose it (docs/limits.md, "What this bounds").

use std::collections::HashMap;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::Request;
use axum::BoxError;
use futures_util::Stream;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::error::{ApiError, ApiResult, Code};

/// Load-tool uploads read at once, all tokens together: each holds a parser and a latency
/// histogram per label (about 190 KiB each, up to 256 labels: about 50 MB), so together they
/// hold at most about 200 MB.
pub const UPLOADS_AT_ONCE: usize = 4;

/// Load-tool uploads of one token read at once, so that one pipeline cannot take every turn.
pub const UPLOADS_PER_TOKEN: usize = 2;

/// What an upload holding a turn must move in each `body_read_timeout_secs` while another
/// upload waits for a turn: less, and it loses its turn (408). A byte within each body-read
/// timeout kept an upload alive, so two tokens' uploads dribbling could hold every turn.
pub const MIN_PACE: u64 = 64 * 1024;

/// The turns of load-tool uploads ([`UPLOADS_AT_ONCE`], [`UPLOADS_PER_TOKEN`]): an upload
/// waits for its turn before its file is read, at most `request_timeout_secs`, then is
/// answered 503; over HTTP/2 it is answered 503 at once.
#[derive(Clone)]
pub struct Uploads {
    all: Arc<Semaphore>,
    /// Each token uploading or waiting: its share of the turns. An entry nobody holds is
    /// dropped at the next upload.
    tokens: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    /// Uploads waiting for a turn now.
    waiting: Arc<AtomicUsize>,
    /// When an upload over HTTP/2 last found no turn free (it does not wait).
    refused: Arc<Mutex<Option<Instant>>>,
}

/// An upload's turn, until it is dropped.
pub struct Turn {
    _token: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
    uploads: Uploads,
}

impl Default for Uploads {
    fn default() -> Self {
        Self {
            all: Arc::new(Semaphore::new(UPLOADS_AT_ONCE)),
            tokens: Arc::default(),
            waiting: Arc::default(),
            refused: Arc::default(),
        }
    }
}

/// Counts an upload as waiting until dropped.
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Uploads {
    /// A turn of the token `token_id`: one of its own, then one of all (in the order asked),
    /// waited for at most `wait`; with no `wait` (HTTP/2), only one free at once.
    pub async fn turn(&self, token_id: &str, wait: Option<Duration>) -> ApiResult<Turn> {
        let share = {
            let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            tokens.retain(|_, share| Arc::strong_count(share) > 1);
            Arc::clone(
                tokens
                    .entry(token_id.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(UPLOADS_PER_TOKEN))),
            )
        };
        let turn = async {
            if let (Ok(own), Ok(all)) = (
                Arc::clone(&share).try_acquire_owned(),
                Arc::clone(&self.all).try_acquire_owned(),
            ) {
                return Ok::<_, ApiError>((own, all));
            }
            if wait.is_none() {
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
            self.waiting.fetch_add(1, Relaxed);
            let _waiting = Waiting(Arc::clone(&self.waiting));
            // A deadline already past: the semaphore is tried once.
            let deadline = Instant::now() + wait.unwrap_or_default();
            let own = tokio::time::timeout_at(deadline, share.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| busy(wait, "this token's"))?;
            let all = tokio::time::timeout_at(deadline, Arc::clone(&self.all).acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| busy(wait, "all tokens'"))?;
            Ok((own, all))
        };
        let (own, all) = turn.await?;
        Ok(Turn {
            _token: own,
            _all: all,
            uploads: self.clone(),
        })
    }

    /// Whether another upload waits for a turn, or found none free within `window`.
    fn wanted(&self, window: Duration) -> bool {
        self.waiting.load(Relaxed) > 0
            || self
                .refused
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|at| at.elapsed() < window)
    }
}

impl Turn {
    /// `req` with its body paced: while another upload wants a turn, it must move at least
    /// [`MIN_PACE`] bytes in each `window`, or it ends with [`TooSlow`].
    pub fn pace(&self, req: Request, window: Duration) -> Request {
        let (parts, body) = req.into_parts();
        let paced = Paced {
            body: body.into_data_stream(),
            uploads: self.uploads.clone(),
            window,
            moved: 0,
            tick: Box::pin(tokio::time::sleep(window)),
        };
        Request::from_parts(parts, Body::from_stream(paced))
    }
}

/// Why a paced body ended: it moved less than [`MIN_PACE`] in a window while another upload
/// wanted its turn.
#[derive(Debug)]
pub struct TooSlow {
    pub moved: u64,
    pub window: Duration,
}

impl std::fmt::Display for TooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the upload moved {} bytes in {} s while other uploads waited for a turn; one \
             holding a turn must move at least {} KiB in each body_read_timeout_secs, so it lost \
             its turn: send it again",
            self.moved,
            self.window.as_secs(),
            MIN_PACE / 1024
        )
    }
}

impl std::error::Error for TooSlow {}

impl TooSlow {
    /// The API's answer: 408, like a body that stopped.
    pub fn error(&self) -> ApiError {
        ApiError::new(Code::RequestTimeout, self.to_string()).with_details(
            json!({"moved_bytes": self.moved, "window_secs": self.window.as_secs(), "min_bytes": MIN_PACE}),
        )
    }
}

struct Paced {
    body: BodyDataStream,
    uploads: Uploads,
    window: Duration,
    /// Bytes moved in this window.
    moved: u64,
    /// The window's end.
    tick: Pin<Box<Sleep>>,
}

impl Stream for Paced {
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        while this.tick.as_mut().poll(cx).is_ready() {
            if this.moved < MIN_PACE && this.uploads.wanted(this.window) {
                let slow = TooSlow {
                    moved: this.moved,
                    window: this.window,
                };
                return Poll::Ready(Some(Err(Box::new(slow))));
            }
            this.moved = 0;
            let next = Instant::now() + this.window;
            this.tick.as_mut().reset(next);
        }
        match Pin::new(&mut this.body).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.moved += chunk.len() as u64;
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn busy(wait: Option<Duration>, whose: &str) -> ApiError {
    let waited = match wait {
        Some(wait) => format!(
            "this one waited {} s for a turn of {whose} (request_timeout_secs)",
            wait.as_secs()
        ),
        // Its data, not read, would hold the connection's flow-control window from the
        // uploads that have their turn.
        None => format!(
            "no turn of {whose} was free, and an upload over HTTP/2 is not kept waiting (it \
             would hold up the other uploads of its connection)"
        ),
    };
    ApiError::new(
        Code::Unavailable,
        format!(
            "the server reads at most {UPLOADS_AT_ONCE} load-tool uploads at once, \
             {UPLOADS_PER_TOKEN} per token; {waited}: send it again later"
        ),
    )
    .with_details(
        json!({"uploads_at_once": UPLOADS_AT_ONCE, "uploads_per_token": UPLOADS_PER_TOKEN}),
    )
}

/// The 408 of a body that ended [`TooSlow`], if `e` is one.
pub fn too_slow(e: &axum::Error) -> Option<ApiError> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(slow) = err.downcast_ref::<TooSlow>() {
            return Some(slow.error());
        }
        cause = err.source();
    }
    None
}
