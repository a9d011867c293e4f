//! The turns of load-tool uploads: at most [`UPLOADS_AT_ONCE`] are read at once,
//! [`UPLOADS_PER_TOKEN`] per token, and while another waits for a turn, one that holds a turn
//! must keep moving ([`MIN_PACE`]) or lose it (docs/limits.md, "What this bounds").

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
use crate::http::bodies::TokenShares;

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
    /// Each token uploading or waiting: its share of the turns.
    tokens: TokenShares,
    /// Uploads that hold a turn of their token's and wait for one of all, now.
    waiting: Arc<AtomicUsize>,
    /// Uploads over HTTP/2 that found no turn of all free (they do not wait), not yet given
    /// one by a paced upload losing its turn, and when the last was.
    refused: Arc<Mutex<(usize, Option<Instant>)>>,
    /// The window of [`MIN_PACE`]: `body_read_timeout_secs`.
    window: Duration,
}

/// An upload's turn, until it is dropped.
pub struct Turn {
    _token: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
    uploads: Uploads,
}

/// Counts an upload as waiting until dropped.
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Uploads {
    /// The turns, with `window` the time in which an upload holding one must move
    /// [`MIN_PACE`] while another wants one.
    pub fn new(window: Duration) -> Self {
        Self {
            all: Arc::new(Semaphore::new(UPLOADS_AT_ONCE)),
            tokens: TokenShares::new(UPLOADS_PER_TOKEN),
            waiting: Arc::default(),
            refused: Arc::default(),
            window,
        }
    }

    /// A turn of the token `token_id`: one of its own, then one of all (in the order asked),
    /// waited for at most `wait`; with no `wait` (HTTP/2), only one free at once.
    pub async fn turn(&self, token_id: &str, wait: Option<Duration>) -> ApiResult<Turn> {
        let share = self.tokens.of(token_id);
        // A deadline already past: the semaphore is tried once.
        let deadline = Instant::now() + wait.unwrap_or_default();
        // Waiting for a turn of its own token's takes none from other tokens' uploads.
        let own = tokio::time::timeout_at(deadline, share.acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| busy(wait, "this token's"))?;
        let all = match Arc::clone(&self.all).try_acquire_owned() {
            Ok(all) => all,
            Err(_) if wait.is_none() => {
                let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
                let fresh = refused.1.is_some_and(|at| at.elapsed() < self.window);
                let before = if fresh { refused.0 } else { 0 };
                *refused = ((before + 1).min(UPLOADS_AT_ONCE), Some(Instant::now()));
                return Err(busy(wait, "all tokens'"));
            }
            Err(_) => {
                self.waiting.fetch_add(1, Relaxed);
                let _waiting = Waiting(Arc::clone(&self.waiting));
                tokio::time::timeout_at(deadline, Arc::clone(&self.all).acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .ok_or_else(|| busy(wait, "all tokens'"))?
            }
        };
        Ok(Turn {
            _token: own,
            _all: all,
            uploads: self.clone(),
        })
    }

    /// Whether another upload wants a turn of all: one waits for it, or one over HTTP/2
    /// found none within the window and no paced upload has lost its turn for it yet (this
    /// call takes that want, so that one refusal costs one turn).
    fn wanted(&self) -> bool {
        if self.waiting.load(Relaxed) > 0 {
            return true;
        }
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = refused.1.is_some_and(|at| at.elapsed() < self.window);
        if fresh && refused.0 > 0 {
            refused.0 -= 1;
            true
        } else {
            false
        }
    }
}

impl Turn {
    /// `req` with its body paced: while another upload wants a turn, it must move at least
    /// [`MIN_PACE`] bytes in each window of time the server spends waiting for them, or it
    /// ends with [`TooSlow`].
    pub fn pace(&self, req: Request) -> Request {
        if self.uploads.window.is_zero() {
            return req;
        }
        let (parts, body) = req.into_parts();
        let paced = Paced {
            body: body.into_data_stream(),
            uploads: self.uploads.clone(),
            moved: 0,
            waited: Duration::ZERO,
            since: None,
            tick: Box::pin(tokio::time::sleep(self.uploads.window)),
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
            "the upload sent {} bytes in {} s of the server waiting for them while other \
             uploads wanted a turn; one holding a turn must send at least {} KiB in each \
             body_read_timeout_secs of waiting, so it lost its turn: send it again",
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
        let details = json!({
            "moved_bytes": self.moved,
            "window_secs": self.window.as_secs(),
            "min_bytes": MIN_PACE,
        });
        ApiError::new(Code::RequestTimeout, self.to_string()).with_details(details)
    }
}

/// A body whose clock runs only while the server waits for its bytes: the time the server
/// spends on bytes it has (parsing them) counts against no client.
struct Paced {
    body: BodyDataStream,
    uploads: Uploads,
    /// Bytes moved in this window.
    moved: u64,
    /// Time of this window spent waiting for bytes, before `since`.
    waited: Duration,
    /// Since when the body waits for bytes, if it does.
    since: Option<Instant>,
    /// The window's end, while the body waits.
    tick: Pin<Box<Sleep>>,
}

impl Stream for Paced {
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let window = this.uploads.window;
        loop {
            match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(since) = this.since.take() {
                        this.waited += since.elapsed();
                    }
                    if this.waited >= window {
                        // The window ended as these bytes came: it is judged without them,
                        // and they start the next.
                        if let Some(slow) = this.judge(window) {
                            return Poll::Ready(Some(Err(Box::new(slow))));
                        }
                    }
                    this.moved += chunk.len() as u64;
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => {}
            }
            let since = *this.since.get_or_insert_with(Instant::now);
            let end = since + window.saturating_sub(this.waited);
            if Instant::now() < end {
                this.tick.as_mut().reset(end);
                if this.tick.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            // A window of waiting is over.
            if let Some(slow) = this.judge(window) {
                return Poll::Ready(Some(Err(Box::new(slow))));
            }
            this.since = None;
        }
    }
}

impl Paced {
    /// At a window's end: too slow, if it moved less than [`MIN_PACE`] while another upload
    /// wants a turn; else the next window starts.
    fn judge(&mut self, window: Duration) -> Option<TooSlow> {
        if self.moved < MIN_PACE && self.uploads.wanted() {
            return Some(TooSlow {
                moved: self.moved,
                window,
            });
        }
        (self.moved, self.waited) = (0, Duration::ZERO);
        None
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

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// The turns, with a window of 200 ms, and an upload's turn that another upload wants.
    async fn wanted_turn() -> (Uploads, Turn) {
        let uploads = Uploads::new(Duration::from_millis(200));
        let turn = uploads.turn("t", Some(Duration::ZERO)).await.unwrap();
        uploads.waiting.fetch_add(1, Relaxed);
        (uploads, turn)
    }

    fn paced(turn: &Turn, body: Body) -> Body {
        turn.pace(Request::new(body)).into_body()
    }

    #[tokio::test]
    async fn a_body_that_sends_nothing_loses_its_turn_when_wanted_only() {
        let (uploads, turn) = wanted_turn().await;
        let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let mut body = paced(&turn, Body::from_stream(never));
        let error = body.frame().await.unwrap().unwrap_err();
        let slow = too_slow(&error).unwrap();
        assert_eq!(slow.code, Code::RequestTimeout);
        assert_eq!(slow.details["moved_bytes"], 0);
        // Nobody wants a turn: it waits on.
        uploads.waiting.fetch_sub(1, Relaxed);
        let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let mut body = paced(&turn, Body::from_stream(never));
        let waited = tokio::time::timeout(Duration::from_millis(600), body.frame()).await;
        assert!(waited.is_err(), "still waiting after three windows");
    }

    /// Found by attacking the server: the clock ran while the server parsed what it had, so a
    /// client that had sent its whole body lost its turn to a slow server (408, 65,238 bytes
    /// moved in the window).
    #[tokio::test]
    async fn time_the_server_spends_on_bytes_it_has_counts_against_no_client() {
        let (_uploads, turn) = wanted_turn().await;
        let mut body = paced(&turn, Body::from(vec![7u8; 10]));
        // The server is busy elsewhere for three windows before it reads.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap().len(), 10);
        assert!(body.frame().await.is_none());
    }

    /// Found by attacking the server: one upload over HTTP/2 refused a turn made every
    /// paced upload lose its turn, for a window, though it did not wait for one.
    #[tokio::test]
    async fn one_refused_upload_costs_one_turn() {
        let uploads = Uploads::new(Duration::from_millis(200));
        let mut turns = Vec::new();
        for token in ["a", "a", "b", "b"] {
            turns.push(uploads.turn(token, None).await.unwrap());
        }
        let refused = uploads.turn("c", None).await.err().unwrap();
        assert_eq!(refused.code, Code::Unavailable);
        assert!(uploads.wanted());
        assert!(!uploads.wanted(), "the refusal's want was taken");
        // A token waiting for a turn of its own wants none of other tokens'.
        let own = uploads.turn("a", Some(Duration::from_millis(300)));
        let (own, wanted) = tokio::join!(own, async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            uploads.wanted()
        });
        assert!(own.is_err() && !wanted);
    }
}
