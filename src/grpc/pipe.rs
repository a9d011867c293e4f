//! Calls other than Watch (Ack, Report, health, reflection) go to tonic's routes as ordinary
//! `http` requests: [`RecvBody`] turns an h2 request stream into a request body, and `pipe`
//! sends tonic's response — headers, data within the peer's flow-control window, trailers —
//! back on the h2 stream. Every byte such a call holds is charged to a [`CallBytes`] budget
//! until the call ends: its headers and a fixed overhead when it opens, its request as it is
//! read, its response as it is sent; a call ends within a time however its peer reads.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{Request, Response};
use http_body::{Body, Frame};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Service, ServiceExt as _};

use crate::service::feedback::Held;

/// What a call is charged when it opens besides its headers: its task, its h2 stream and the
/// state tonic keeps for it (4.7–7.7 KiB measured per held call; a Watch's opener 6.5 KiB).
pub const CALL_OVERHEAD: usize = 8 * 1024;

/// Bytes that calls in flight may hold, shared by every connection of the listener: a charge
/// that does not fit is refused at once (`RESOURCE_EXHAUSTED`), never waited for, so calls
/// cannot hold parts of the budget while they wait for the rest of it.
#[derive(Clone)]
pub struct CallBytes {
    free: Arc<Semaphore>,
    total: usize,
    /// What the calls charged are, and the setting that bounds them, for the refusal.
    what: &'static str,
}

impl CallBytes {
    pub fn new(total: usize, what: &'static str) -> Self {
        Self {
            free: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            total,
            what,
        }
    }

    /// Nothing of it is taken, and nobody else holds it.
    fn is_idle(&self) -> bool {
        Arc::strong_count(&self.free) == 1
            && self.free.available_permits() == self.total.min(Semaphore::MAX_PERMITS)
    }

    /// Takes `bytes` of the budget until the permit is dropped.
    pub fn charge(&self, bytes: usize) -> Result<OwnedSemaphorePermit, tonic::Status> {
        u32::try_from(bytes)
            .ok()
            .and_then(|n| self.free.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| {
                let total = match self.total % (1 << 20) {
                    0 => format!("{} MiB", self.total >> 20),
                    _ => format!("{} bytes", self.total),
                };
                tonic::Status::resource_exhausted(format!(
                    "the server holds {total} of {} already; try again later",
                    self.what
                ))
            })
    }
}

/// What a call has been charged, held until it ends (by its body and by the call itself):
/// to its budget and, for an agent's call, to its token's share of that budget as well.
#[derive(Clone)]
pub struct Charge {
    budgets: Vec<CallBytes>,
    held: Arc<Mutex<Held>>,
}

impl Charge {
    /// Charges a call opened with `headers` (`CALL_OVERHEAD` and the headers' HTTP/2 size)
    /// to `budget`, and to `share` (its caller's part of `budget`) if any.
    pub fn open(
        budget: &CallBytes,
        share: Option<&CallBytes>,
        headers: &http::HeaderMap,
    ) -> Result<Self, tonic::Status> {
        let size: usize = headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum();
        // The share first: a caller past its share does not take from the others' budget.
        let budgets: Vec<CallBytes> = share.into_iter().chain([budget]).cloned().collect();
        let held = hold(&budgets, CALL_OVERHEAD + size)?;
        Ok(Self {
            budgets,
            held: Arc::new(Mutex::new(held)),
        })
    }

    /// Takes `bytes` of every budget the call is charged to, until what it answers is dropped.
    pub fn hold(&self, bytes: usize) -> Result<Held, tonic::Status> {
        hold(&self.budgets, bytes)
    }

    /// Adds `bytes` to the charge.
    fn add(&self, bytes: usize) -> Result<(), tonic::Status> {
        let more = self.hold(bytes)?;
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .merge(more);
        Ok(())
    }
}

/// `bytes` of each of `budgets`, or none of them.
fn hold(budgets: &[CallBytes], bytes: usize) -> Result<Held, tonic::Status> {
    let permits = budgets.iter().map(|b| b.charge(bytes));
    Ok(Held::new(permits.collect::<Result<_, _>>()?))
}

/// Each agent token's share of a budget (`total` bytes of it), made when the token first
/// calls. The map holds the tokens with calls in flight, and up to 1,024 others.
#[derive(Clone)]
pub struct Shares {
    total: usize,
    what: &'static str,
    by_token: Arc<Mutex<HashMap<String, CallBytes>>>,
}

/// Shares kept for tokens without a call in flight before they are swept.
const IDLE_SHARES: usize = 1024;

impl Shares {
    pub fn new(total: usize, what: &'static str) -> Self {
        Self {
            total,
            what,
            by_token: Arc::default(),
        }
    }

    /// The share of the token `token_id`.
    pub fn of(&self, token_id: &str) -> CallBytes {
        let mut by_token = self.by_token.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = by_token.get(token_id) {
            return share.clone();
        }
        if by_token.len() >= IDLE_SHARES {
            by_token.retain(|_, share| !share.is_idle());
        }
        let share = CallBytes::new(self.total, self.what);
        by_token.insert(token_id.to_owned(), share.clone());
        share
    }
}

/// An h2 request stream as an [`http_body::Body`]: its data, each chunk charged to the call
/// (`RESOURCE_EXHAUSTED` when the budget cannot take it) and its window given back as it is
/// handed on, then its trailers; with a deadline, a request not in full by then fails
/// `DEADLINE_EXCEEDED`.
///
/// A request of one message (a unary call) ends once its message is in: tonic decodes a
/// message as soon as it has arrived and then waits for the end of the request, so a peer
/// that never ended it would keep the decoded message, uncharged, until the deadline. More
/// data that has arrived by then is a second message, which a unary call may not carry: the
/// call fails `INTERNAL`, as grpc-go's servers answer (tonic would decode and drop it). Data
/// that has not arrived yet is not waited for.
pub struct RecvBody {
    recv: RecvStream,
    data_done: bool,
    deadline: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    charge: Charge,
    /// For a request of one message: how much of it has arrived.
    message: Option<OneMessage>,
    /// The one message is in: the body ends without waiting for the peer.
    ended: bool,
    /// Whether data that arrived after the one message was looked for.
    rest_checked: bool,
}

impl RecvBody {
    pub fn new(
        recv: RecvStream,
        within: Option<Duration>,
        charge: Charge,
        one_message: bool,
    ) -> Self {
        Self {
            recv,
            data_done: false,
            deadline: within.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
            charge,
            message: one_message.then(OneMessage::default),
            ended: false,
            rest_checked: false,
        }
    }
}

/// How much of a request of one gRPC message has arrived: its 5-byte prefix (flag, length)
/// and the bytes seen.
#[derive(Default)]
struct OneMessage {
    prefix: [u8; 5],
    seen: usize,
}

impl OneMessage {
    /// Counts `data`, the next bytes of the request; whether the message is now in whole.
    fn complete_after(&mut self, data: &[u8]) -> bool {
        let start = self.seen.min(5);
        let head = (5 - start).min(data.len());
        self.prefix[start..start + head].copy_from_slice(&data[..head]);
        self.seen = self.seen.saturating_add(data.len());
        if self.seen < 5 {
            return false;
        }
        self.seen - 5 >= self.len()
    }

    /// The message's length, from its prefix.
    fn len(&self) -> usize {
        let [_, len @ ..] = self.prefix;
        u32::from_be_bytes(len) as usize
    }

    /// Whether more bytes than the message's arrived.
    fn overran(&self) -> bool {
        self.seen >= 5 && self.seen - 5 > self.len()
    }
}

/// A second message in a unary call.
fn second_message() -> BoxError {
    Box::new(tonic::Status::internal(
        "a unary call carries one request message; this one carries more",
    ))
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
        if self.ended {
            if !std::mem::replace(&mut self.rest_checked, true) && !self.recv.is_end_stream() {
                if let Poll::Ready(Some(Ok(data))) = self.recv.poll_data(cx) {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    if !data.is_empty() {
                        return Poll::Ready(Some(Err(second_message())));
                    }
                }
            }
            return Poll::Ready(None);
        }
        if !self.data_done {
            match self.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    if let Err(status) = self.charge.add(data.len()) {
                        // Dropping the stream with the call discards what else the peer sends.
                        self.deadline = None;
                        return Poll::Ready(Some(Err(Box::new(status))));
                    }
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    if let Some(message) = &mut self.message {
                        if message.complete_after(&data) {
                            if message.overran() {
                                self.deadline = None;
                                return Poll::Ready(Some(Err(second_message())));
                            }
                            self.ended = true;
                            self.deadline = None;
                        }
                    }
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
        self.ended || self.recv.is_end_stream()
    }
}

/// Calls `service` with `req` and sends its response on `respond`; the request must arrive in
/// full `within` that time, if given, and the whole call end within `life` (a call still
/// running then is reset, `CANCEL`, whatever it waits for: its handler, or a peer that does
/// not take its response); a call its peer resets before it is answered ends there, its
/// handler dropped. The call holds `charge`, and what its request and response add to it,
/// until it ends. With `one_message` (a unary call) the request ends once its message is in.
pub async fn serve_call<S>(
    service: S,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    (within, life): (Option<Duration>, Duration),
    charge: Charge,
    one_message: bool,
) where
    S: Service<Request<RecvBody>, Response = Response<tonic::body::Body>, Error = Infallible>,
{
    let req = req.map(|recv| RecvBody::new(recv, within, charge.clone(), one_message));
    let call = async {
        // A peer that resets the call (or goes away) before it is answered has given up on
        // it: the handler is dropped where it is, so a Report waiting for its turn is neither
        // decoded nor stored while its agent keeps the windows to send them again.
        let mut handler = std::pin::pin!(service.oneshot(req));
        let answered = std::future::poll_fn(|cx| {
            if let Poll::Ready(Ok(response)) = handler.as_mut().poll(cx) {
                return Poll::Ready(Some(response));
            }
            respond.poll_reset(cx).map(|_| None)
        })
        .await;
        let Some(response) = answered else {
            tracing::debug!("gRPC call reset by its peer before it was answered");
            return;
        };
        if let Err(e) = pipe(response, respond, &charge).await {
            tracing::debug!(error = %e, "gRPC response not sent in full");
        }
    };
    // Dropping the call's streams unfinished resets them (h2 sends RST_STREAM CANCEL).
    if tokio::time::timeout(life, call).await.is_err() {
        tracing::debug!("gRPC call did not end within {} s; reset", life.as_secs());
    }
    drop(charge);
}

/// Sends `response` on `respond`: the headers, then every data frame as the peer's window
/// allows (never more buffered than one frame; each charged to `charge`, the stream reset when
/// the budget cannot take it), then the trailers. A reset by the peer ends it early.
async fn pipe(
    response: Response<tonic::body::Body>,
    mut respond: SendResponse<Bytes>,
    charge: &Charge,
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
            Ok(data) => {
                if let Err(status) = charge.add(data.len()) {
                    tracing::debug!(%status, "gRPC response not sent");
                    send.send_reset(Reason::CANCEL);
                    return Ok(());
                }
                send_within_window(&mut send, data).await?
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A gRPC message of `len` bytes (its 5-byte prefix and zeros).
    fn message(len: u8) -> Bytes {
        let mut m = vec![0, 0, 0, 0, len];
        m.resize(5 + usize::from(len), 0);
        Bytes::from(m)
    }

    /// A unary call's body on the server, once the client has sent `frames` (each DATA, and
    /// then END_STREAM if `end`) and the server has read them all: the client's PING is
    /// answered only after every frame before it was read.
    /// The body, and what keeps its call open.
    type Call = (
        RecvBody,
        (
            SendStream<Bytes>,
            h2::client::SendRequest<Bytes>,
            SendResponse<Bytes>,
        ),
    );

    async fn body_after(frames: &[Bytes], end: bool) -> Call {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (requests, mut request) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            while let Some(Ok((req, respond))) = conn.accept().await {
                requests.send((req, respond)).unwrap();
            }
        });
        let (client, mut conn) = h2::client::handshake(client_io).await.unwrap();
        let mut ping = conn.ping_pong().unwrap();
        tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let (_response, mut send) = client
            .send_request(Request::post("/t.T/M").body(()).unwrap(), false)
            .unwrap();
        for data in frames {
            send.send_data(data.clone(), false).unwrap();
        }
        if end {
            send.send_data(Bytes::new(), true).unwrap();
        }
        ping.ping(h2::Ping::opaque()).await.unwrap();
        let (req, respond) = request.recv().await.unwrap();
        let budget = CallBytes::new(1 << 20, "test calls");
        let charge = Charge::open(&budget, None, &http::HeaderMap::new()).unwrap();
        let body = RecvBody::new(req.into_body(), None, charge, true);
        (body, (send, client, respond))
    }

    /// What the body gives: `data` (bytes), `end`, or the status of its error.
    async fn next(body: &mut RecvBody) -> String {
        match std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => format!("data {}", data.len()),
                Err(_) => "trailers".to_owned(),
            },
            Some(Err(e)) => match e.downcast::<tonic::Status>() {
                Ok(status) => format!("{:?}: {}", status.code(), status.message()),
                Err(e) => format!("error {e}"),
            },
            None => "end".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_second_message_in_a_frame_of_its_own_fails_the_call() {
        let second = "Internal: a unary call carries one request message; this one carries more";
        let (mut body, _call) = body_after(&[message(3), message(4)], false).await;
        assert_eq!(next(&mut body).await, "data 8");
        assert_eq!(next(&mut body).await, second);
        // The message, then the end of the request as an empty frame (tonic, grpc-go).
        let (mut body, _call) = body_after(&[message(3)], true).await;
        assert_eq!(next(&mut body).await, "data 8");
        assert_eq!(next(&mut body).await, "end");
        // The message, the request not ended: not waited for.
        let (mut body, _call) = body_after(&[message(3)], false).await;
        assert_eq!(next(&mut body).await, "data 8");
        assert_eq!(next(&mut body).await, "end");
    }
}
