//! Calls other than Watch (Ack, Report, health, reflection) go to tonic's routes as ordinary
//! `http` requests: [`RecvBody`] turns an h2 request stream into a request body, and `pipe`
//! sends tonic's response — headers, data within the peer's flow-control window, trailers —
//! back on the h2 stream.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response};
use http_body::{Body, Frame};
use tower::{Service, ServiceExt as _};

/// An h2 request stream as an [`http_body::Body`]: its data, each chunk's window given back
/// as it is handed on, then its trailers; with a deadline, a request not in full by then
/// fails `DEADLINE_EXCEEDED`.
pub struct RecvBody {
    recv: RecvStream,
    data_done: bool,
    deadline: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
}

impl RecvBody {
    pub fn new(recv: RecvStream, within: Option<Duration>) -> Self {
        Self {
            recv,
            data_done: false,
            deadline: within.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some((within, sleep)) = &mut self.deadline {
            if sleep.as_mut().poll(cx).is_ready() {
                // tonic answers a body error that is a `Status` with that status.
                let status = tonic::Status::deadline_exceeded(format!(
                    "the request did not arrive in full within {} s",
                    within.as_secs()
                ));
                return Poll::Ready(Some(Err(Box::new(status))));
            }
        }
        if !self.data_done {
            match self.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => self.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match self.recv.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => {
                self.deadline = None;
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Ready(Ok(None)) => {
                self.deadline = None;
                Poll::Ready(None)
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// Calls `service` with `req` and sends its response on `respond`; the request must arrive in
/// full `within` that time, if given.
pub async fn serve_call<S>(
    service: S,
    req: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    within: Option<Duration>,
) where
    S: Service<Request<RecvBody>, Response = Response<tonic::body::Body>, Error = Infallible>,
{
    let req = req.map(|recv| RecvBody::new(recv, within));
    let Ok(response) = service.oneshot(req).await;
    if let Err(e) = pipe(response, respond).await {
        tracing::debug!(error = %e, "gRPC response not sent in full");
    }
}

/// Sends `response` on `respond`: the headers, then every data frame as the peer's window
/// allows (never more buffered than one frame), then the trailers. A reset by the peer ends
/// it early.
async fn pipe(
    response: Response<tonic::body::Body>,
    mut respond: SendResponse<Bytes>,
) -> Result<(), h2::Error> {
    let (parts, mut body) = response.into_parts();
    let end = body.is_end_stream();
    let mut send = respond.send_response(Response::from_parts(parts, ()), end)?;
    if end {
        return Ok(());
    }
    loop {
        let frame = std::future::poll_fn(|cx| {
            if let Poll::Ready(reason) = send.poll_reset(cx) {
                return Poll::Ready(Err(reason));
            }
            Pin::new(&mut body).poll_frame(cx).map(Ok)
        })
        .await;
        let frame = match frame {
            Err(Ok(reason)) => return Err(reason.into()),
            Err(Err(e)) => return Err(e),
            Ok(None) => return send.send_data(Bytes::new(), true),
            Ok(Some(Err(status))) => {
                // The body failed mid-way (tonic reports it as a status): say so and stop.
                tracing::debug!(%status, "gRPC response body failed");
                send.send_reset(Reason::INTERNAL_ERROR);
                return Ok(());
            }
            Ok(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(data) => send_within_window(&mut send, data).await?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return send.send_trailers(trailers);
                }
            }
        }
    }
}

/// Sends `data`, in pieces as the peer's flow-control window opens.
async fn send_within_window(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
) -> Result<(), h2::Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = std::future::poll_fn(|cx| {
            if send.capacity() > 0 {
                return Poll::Ready(Ok(send.capacity()));
            }
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(n))) => Poll::Ready(Ok(n)),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Err(e)),
                Poll::Ready(None) => Poll::Ready(Err(h2::Error::from(Reason::STREAM_CLOSED))),
                Poll::Pending => match send.poll_reset(cx) {
                    Poll::Ready(Ok(reason)) => Poll::Ready(Err(reason.into())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                },
            }
        })
        .await?;
        let piece = data.split_to(granted.min(data.len()));
        send.send_data(piece, false)?;
    }
    Ok(())
}
