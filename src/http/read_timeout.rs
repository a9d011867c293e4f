//! The body-read timeout (`body_read_timeout_secs`): a request body fails when the server has
//! waited this long for its next bytes. The clock runs only while the server waits: time it
//! spends on bytes it has (a multipart parser that read ahead, a parser busy with a file)
//! counts against no client. (tower-http's `TimeoutBody`, used before, checked its clock before
//! the body, so a body whose bytes had come failed once the server had been busy that long.)

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::BoxError;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Sleep;

/// A body that stopped arriving: nothing came for the body-read timeout.
#[derive(Debug)]
pub struct Stalled(pub Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no bytes of the body came for {} s", self.0.as_secs())
    }
}

impl std::error::Error for Stalled {}

/// `body`, failing with [`Stalled`] once the server has waited `timeout` for its next frame.
pub struct ReadTimeout<B> {
    body: B,
    timeout: Duration,
    /// The deadline, once set for this wait.
    sleep: Pin<Box<Sleep>>,
    /// Whether the server waits for a frame, since `sleep` was set.
    waiting: bool,
}

impl<B> ReadTimeout<B> {
    pub fn new(body: B, timeout: Duration) -> Self {
        Self {
            body,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
        }
    }
}

impl<B> HttpBody for ReadTimeout<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        // The body first: bytes that have come are never late.
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.waiting = false;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if !this.waiting {
            this.waiting = true;
            let deadline = tokio::time::Instant::now() + this.timeout;
            this.sleep.as_mut().reset(deadline);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use http_body_util::{BodyExt as _, StreamBody};
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::*;

    /// A body whose frames are sent on the channel, read with a timeout of 200 ms.
    fn channel_body() -> (mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = mpsc::channel(4);
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(bytes)), rx))
        });
        let body = StreamBody::new(Box::pin(frames));
        (
            tx,
            Body::new(ReadTimeout::new(body, Duration::from_millis(200))),
        )
    }

    #[tokio::test]
    async fn a_body_whose_bytes_stop_fails_after_the_timeout() {
        let (tx, mut body) = channel_body();
        tx.send(Bytes::from_static(b"first")).await.unwrap();
        assert!(body.frame().await.unwrap().is_ok());
        let started = Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(error.into_inner().is::<Stalled>());
        drop(tx);
    }

    /// Found by attacking the server: the timeout's clock ran while the server was busy with
    /// bytes it had, so a multipart upload whose parser had read ahead failed (408) once the
    /// server had spent the timeout on its parts, though its next bytes had come.
    #[tokio::test]
    async fn bytes_that_came_while_the_server_was_busy_are_not_late() {
        let (tx, mut body) = channel_body();
        // The server asks, finds nothing yet, and turns to other work.
        let asked = tokio::time::timeout(Duration::from_millis(20), body.frame()).await;
        assert!(asked.is_err());
        tx.send(Bytes::from_static(b"came")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "came");
    }
}
