//! Watch streams, served by their connection's task.
//!
//! A Watch is opened by a task of its own ([`open`]: authenticated from its headers, one of
//! its token's streams taken, the request read within a size and a time bound, validated by
//! `service::agents::watch`), then handed to the task of its
//! HTTP/2 connection, which holds every Watch stream of the connection in [`Watches`]. When the
//! hub changes, that task sends each stream what it lacks, one pass over the streams: no task
//! per stream is woken, and a publication leaves in as few writes as the connection needs.
//! Most streams send the same message (one chain at its new revision), framed once by the hub
//! and shared.
//!
//! A stream holds no queue: it sends only when the peer's flow-control window has room for
//! the whole update, and otherwise sends the newest one when the window opens, so a slow agent
//! never receives a backlog and never delays the others.
//!
//! Each stream has a waker of its own, registered with h2 for the stream's reset and window:
//! when it fires, the stream's key is queued and the connection's task looks at that stream
//! alone. Nothing polls the streams on a timer, and a task's wake costs no pass over them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use budget_proto::codec::{frame, unframe};
use budget_proto::wire::{BudgetUpdate, WatchRequest};
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, Request, Response};

use super::pipe::Charge;
use super::Control;
use crate::fleet::{Attached, Fleet, TokenPermit};
use crate::publish::{ChainEntry, HubState, Member};
use crate::service::agents::{self, Selection};

/// Response metadata of every Watch stream, in its headers and in the trailers of a stream
/// ended because the server stops: the milliseconds over which the agent should spread its
/// reconnect ([`Fleet::reconnect_spread`]).
pub const RECONNECT_SPREAD: &str = "budget-reconnect-spread-ms";

fn spread_value(spread: std::time::Duration) -> http::HeaderValue {
    http::HeaderValue::from(u64::try_from(spread.as_millis()).unwrap_or(u64::MAX))
}

/// Largest Watch request read: the largest valid one (256 chains and 256 held chains of 64
/// characters, 32 labels of 64 + 256 bytes, ids and client) is about 46 KiB.
pub const MAX_WATCH_REQUEST: usize = 64 * 1024;

/// Longest a Watch request may take to arrive, from its headers to its end.
pub const WATCH_REQUEST_WITHIN: Duration = Duration::from_secs(10);

/// A Watch accepted by its opener, for the connection's task to serve.
pub struct Opened {
    respond: SendResponse<Bytes>,
    selection: Selection,
    known: i64,
    held: Option<BTreeSet<String>>,
    slot: Attached,
    permit: TokenPermit,
    member: Member,
}

/// Reads, authenticates and validates a Watch request; on success returns it for the
/// connection's task to serve, otherwise answers the error (trailers only). The `opening`
/// charge is held until the caller is known and has taken one of its token's streams.
pub async fn open(
    control: Control,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    opening: Charge,
) -> Option<Box<Opened>> {
    match accept(&control, req, opening).await {
        Ok(watch) => Some(Box::new(Opened {
            respond,
            selection: watch.selection,
            known: watch.known_revision,
            held: watch.held,
            slot: watch.slot,
            permit: watch.permit,
            member: watch.member,
        })),
        Err(status) => {
            let response: Response<()> = status.into_http();
            let _ = respond.send_response(response, true);
            None
        }
    }
}

async fn accept(
    control: &Control,
    req: Request<RecvStream>,
    opening: Charge,
) -> Result<agents::Watch, tonic::Status> {
    let (parts, mut body) = req.into_parts();
    let grpc = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc || parts.method != http::Method::POST {
        return Err(tonic::Status::invalid_argument(
            "Watch is a gRPC call: POST with content-type application/grpc",
        ));
    }
    // Who asks, and one of its token's streams, before any of the request is read: a client
    // without an agent token is refused from its headers, and a token has no more requests
    // being read than it may hold streams.
    let state = &control.state;
    let principal = control.caller(&parts.headers).await?;
    let permit = agents::take_stream(state, &principal)?;
    drop(opening);
    let bytes = tokio::time::timeout(WATCH_REQUEST_WITHIN, read_request(&mut body))
        .await
        .map_err(|_| {
            tonic::Status::deadline_exceeded(format!(
                "the Watch request did not arrive in full within {} s",
                WATCH_REQUEST_WITHIN.as_secs()
            ))
        })??;
    let req: WatchRequest = unframe(&bytes, "WatchRequest")
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    let request = agents::WatchRequest {
        agent_id: req.agent_id,
        service: req.service,
        chains: req.chains,
        known_revision: req.known_revision,
        labels: req.labels,
        client: req.client,
        known_chains: req.known_chains,
    };
    Ok(agents::watch(state, &principal, request, permit).await?)
}

/// A Watch request's bytes, at most [`MAX_WATCH_REQUEST`].
async fn read_request(body: &mut RecvStream) -> Result<Vec<u8>, tonic::Status> {
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk =
            chunk.map_err(|e| tonic::Status::cancelled(format!("request not read: {e}")))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if bytes.len() + chunk.len() > MAX_WATCH_REQUEST {
            return Err(tonic::Status::resource_exhausted(format!(
                "a Watch request is at most {MAX_WATCH_REQUEST} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// One open Watch stream.
struct Stream {
    send: SendStream<Bytes>,
    selection: Selection,
    /// Revision of each chain sent so far.
    sent: Sent,
    known: i64,
    /// The last update did not fit the peer's window: the newest is sent when it opens.
    blocked: bool,
    /// Wakes the connection's task for this stream ([`Woken`]).
    waker: Waker,
    /// The same waker, to mute it.
    hook: Arc<StreamWaker>,
    /// Its agent reads as connected while it is held (and no longer once the stream is
    /// dropped).
    slot: Attached,
    _permit: TokenPermit,
    /// Which canaries select the agent.
    member: Member,
}

/// The chains a pass over a connection's streams handed to h2, counted per publication and
/// timed once, when the pass ends (its frames are written after it): one clock read and two
/// atomic adds per publication rather than per stream.
#[derive(Default)]
struct Handed(Vec<(std::time::SystemTime, u64)>);

impl Handed {
    fn add(&mut self, published: std::time::SystemTime) {
        match self.0.iter_mut().find(|(at, _)| *at == published) {
            Some((_, n)) => *n += 1,
            None => self.0.push((published, 1)),
        }
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        for (published, streams) in self.0.drain(..) {
            crate::observe::delivered(published, streams);
        }
    }
}

/// The revision of each chain a stream has been sent.
enum Sent {
    /// For a stream of named chains: one per chain of its selection, in the selection's order
    /// (0 until the chain is sent), so that an update compares no chain names.
    Selected(Box<[i64]>),
    /// For a stream of a service's chains, which come and go: sorted by chain (usually one or
    /// a few; a `BTreeMap` took a 368-byte node per stream).
    Named(Vec<(String, i64)>),
}

impl Sent {
    fn for_selection(selection: &Selection) -> Self {
        match selection {
            Selection::Chains(chains) => Self::Selected(vec![0; chains.len()].into()),
            // Exact for the usual single chain (a vector grown from empty holds four).
            Selection::Service(_) => Self::Named(Vec::with_capacity(1)),
        }
    }

    /// The revision of a chain sent so far: the `at`th of the selection, or named `chain`.
    fn get(&self, at: Option<usize>, chain: &str) -> Option<i64> {
        match (self, at) {
            (Self::Selected(sent), Some(at)) => sent.get(at).copied().filter(|r| *r != 0),
            (Self::Named(sent), _) => sent
                .binary_search_by(|(c, _)| c.as_str().cmp(chain))
                .ok()
                .map(|at| sent[at].1),
            (Self::Selected(_), None) => None,
        }
    }

    /// Records `revision` of a chain as sent; whether the chain had been sent before.
    fn set(&mut self, at: Option<usize>, chain: &str, revision: i64) -> bool {
        match (self, at) {
            (Self::Selected(sent), Some(at)) => match sent.get_mut(at) {
                Some(have) => std::mem::replace(have, revision) != 0,
                None => false,
            },
            (Self::Named(sent), _) => match sent.binary_search_by(|(c, _)| c.as_str().cmp(chain)) {
                Ok(at) => {
                    sent[at].1 = revision;
                    true
                }
                Err(at) => {
                    sent.insert(at, (chain.to_owned(), revision));
                    false
                }
            },
            (Self::Selected(_), None) => false,
        }
    }
}

/// What a stream lacks of the hub's `state`.
struct Pending<'s> {
    frame: Bytes,
    revision: i64,
    /// The chains to send, at their entry's revision, each with its place in the selection.
    entries: Vec<(Option<usize>, &'s Arc<ChainEntry>)>,
}

impl Stream {
    /// Calls `f` with the chain entry of each chain the stream selects, and the entry the
    /// agent gets of it: a canary's where one selects the agent; and, for a stream of named
    /// chains, the chain's place in its selection.
    fn for_each_selected<'s>(
        &self,
        state: &'s HubState,
        mut f: impl FnMut(Option<usize>, &'s Arc<ChainEntry>, &'s Arc<ChainEntry>),
    ) {
        let member = &self.member;
        match &self.selection {
            Selection::Chains(set) => set
                .iter()
                .enumerate()
                .filter_map(|(at, c)| state.get(c).map(|e| (at, e)))
                .for_each(|(at, e)| f(Some(at), e, e.for_agent(member))),
            Selection::Service(service) => state.values().for_each(|e| {
                let got = e.for_agent(member);
                if got.involves(service) {
                    f(None, e, got);
                }
            }),
        }
    }

    /// At open: the chains the agent resumes with (at most its known revision, and among
    /// `held` when it named them) count as sent and accepted, and fleet status shows it
    /// receiving them.
    /// Every other chain it selects is sent, whatever its revision; so is a chain with a
    /// canary published at or below the agent's revision, as the agent may hold either the
    /// canary or the chain's own entry (its labels may have changed since).
    fn adopt_held(&mut self, state: &HubState, held: Option<&BTreeSet<String>>) {
        if self.known <= 0 {
            return;
        }
        let mut adopted: Vec<(Option<usize>, &Arc<ChainEntry>)> = Vec::new();
        self.for_each_selected(state, |at, base, e| {
            let either = base
                .canary()
                .is_some_and(|(_, canary)| canary.revision() <= self.known);
            let held = held.is_none_or(|h| h.contains(&e.live.chain));
            if !either && held && e.revision() <= self.known {
                adopted.push((at, e));
            }
        });
        if adopted.is_empty() {
            return;
        }
        let chains: Vec<String> = adopted.iter().map(|(_, e)| e.live.chain.clone()).collect();
        // An agent resumes with the entries it accepted (its cache keeps no refused one): the
        // newest of them counts as acknowledged. Its ACK may have been taken by the replica it
        // left and not stored before it moved; it does not send that ACK again.
        let accepted = adopted.iter().map(|(_, e)| e.revision()).max().unwrap_or(0);
        for (at, e) in adopted {
            self.sent.set(at, &e.live.chain, e.revision());
        }
        self.slot.delivered(self.known, &chains);
        self.slot.resumed_with(accepted);
    }

    fn pending<'s>(&self, state: &'s HubState) -> Option<Pending<'s>> {
        let mut revision = self.known;
        let mut entries: Vec<(Option<usize>, &'s Arc<ChainEntry>)> = Vec::new();
        self.for_each_selected(state, |at, _, entry| {
            let rev = entry.revision();
            revision = revision.max(rev);
            // A chain not sent yet was not held at open (`adopt_held`).
            let newer = self
                .sent
                .get(at, &entry.live.chain)
                .is_none_or(|have| rev > have);
            if newer {
                entries.push((at, entry));
            }
        });
        let frame = match entries.as_slice() {
            [] => return None,
            // The usual update: one chain, at the newest revision: the hub's shared frame.
            [(_, one)] if one.revision() == revision => one.frame.clone(),
            many => frame(&BudgetUpdate {
                revision,
                chains: many.iter().map(|(_, e)| e.encoded.clone()).collect(),
            }),
        };
        Some(Pending {
            frame,
            revision,
            entries,
        })
    }

    /// Sends what the stream lacks once the peer's window takes some of it (otherwise its
    /// waker fires when the window grows); `false` once the stream is gone. h2 holds the part
    /// the window does not take yet, and gives the stream no capacity while it does, so a
    /// stream whose agent stops reading holds one update, and the newest is sent when it reads.
    /// (Waiting for room for the whole update never ends for one larger than the peer's
    /// window, 64 KiB by default, or than the stream's send buffer.)
    fn deliver(&mut self, state: &HubState, handed: &mut Handed) -> bool {
        let Some(p) = self.pending(state) else {
            self.blocked = false;
            return true;
        };
        // h2 tells the stream's waker when it assigns the capacity reserved, which it does at
        // once when the window has room: muted meanwhile (this task is the one looking), and
        // registered again once the update is sent.
        self.hook.muted.store(true, Ordering::Relaxed);
        self.send.reserve_capacity(p.frame.len());
        self.hook.muted.store(false, Ordering::Relaxed);
        let mut cx = Context::from_waker(&self.waker);
        while self.send.capacity() == 0 {
            match self.send.poll_capacity(&mut cx) {
                // Grown meanwhile: look again (the next poll is pending until it grows again).
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(None | Some(Err(_))) => return false,
                Poll::Pending => {
                    self.blocked = true;
                    return true;
                }
            }
        }
        self.blocked = false;
        if self.send.send_data(p.frame, false).is_err() || self.send.poll_reset(&mut cx).is_ready()
        {
            return false;
        }
        let mut new_chains = Vec::new();
        for (at, entry) in p.entries {
            let chain = &entry.live.chain;
            if self.sent.set(at, chain, entry.revision()) {
                handed.add(entry.published);
            } else {
                new_chains.push(chain.clone());
            }
        }
        self.known = p.revision;
        self.slot.delivered(p.revision, &new_chains);
        true
    }

    /// The stream's waker fired: `false` when the peer reset or closed it; otherwise it is
    /// watched again and, if it was blocked, sent its newest update when the window takes it.
    fn woken(&mut self, state: &HubState, handed: &mut Handed) -> bool {
        let mut cx = Context::from_waker(&self.waker);
        if self.send.poll_reset(&mut cx).is_ready() {
            return false;
        }
        !self.blocked || self.deliver(state, handed)
    }
}

/// The keys of the streams whose waker fired since the connection's task last looked, and
/// that task's waker. A stream's waker is held by h2 once at most, so at most one key per
/// stream waits here.
#[derive(Default)]
struct Woken {
    keys: Mutex<Vec<usize>>,
    task: AtomicWaker,
}

/// The waker of one stream: queues its key and wakes the connection's task, unless muted.
struct StreamWaker {
    key: usize,
    woken: Arc<Woken>,
    muted: AtomicBool,
}

impl Wake for StreamWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.muted.load(Ordering::Relaxed) {
            return;
        }
        let mut keys = self
            .woken
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        keys.push(self.key);
        drop(keys);
        self.woken.task.wake();
    }
}

/// The Watch streams of one connection.
pub struct Watches {
    streams: slab::Slab<Stream>,
    woken: Arc<Woken>,
    fleet: Fleet,
}

impl Watches {
    pub fn new(fleet: Fleet) -> Self {
        Self {
            // Most connections carry one agent's stream: a slab grown from empty holds four.
            streams: slab::Slab::with_capacity(1),
            woken: Arc::default(),
            fleet,
        }
    }

    /// Answers an opened Watch's headers and sends it what it lacks of `state` at once.
    pub fn add(&mut self, opened: Opened, state: &HubState) {
        let Opened {
            mut respond,
            selection,
            known,
            held,
            slot,
            permit,
            member,
        } = opened;
        let mut head = Response::new(());
        head.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        let spread = self.fleet.reconnect_spread();
        head.headers_mut()
            .insert(RECONNECT_SPREAD, spread_value(spread));
        let key = self.streams.vacant_key();
        let hook = Arc::new(StreamWaker {
            key,
            woken: self.woken.clone(),
            muted: AtomicBool::new(false),
        });
        let waker = Waker::from(hook.clone());
        let stream = Stream {
            send: match respond.send_response(head, false) {
                Ok(send) => send,
                // The peer reset the stream meanwhile: nothing to serve.
                Err(_) => return,
            },
            sent: Sent::for_selection(&selection),
            selection,
            known,
            blocked: false,
            waker,
            hook,
            slot,
            _permit: permit,
            member,
        };
        let stream = self.streams.insert(stream);
        self.streams[stream].adopt_held(state, held.as_ref());
        let handed = &mut Handed::default();
        if !(self.streams[stream].deliver(state, handed)
            && self.streams[stream].woken(state, handed))
        {
            self.streams.remove(stream);
        }
    }

    /// Sends every stream what it lacks of the hub's `state`.
    pub fn deliver(&mut self, state: &HubState) {
        let handed = &mut Handed::default();
        self.streams.retain(|_, s| s.deliver(state, handed));
    }

    /// Looks at the streams whose waker fired: forgets those the peer reset or closed, sends
    /// the blocked ones whose window opened their newest update of `state`. Ready when it
    /// looked at any.
    pub fn poll_woken(&mut self, cx: &mut Context<'_>, state: &HubState) -> Poll<()> {
        self.woken.task.register(cx.waker());
        let keys = std::mem::take(
            &mut *self
                .woken
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if keys.is_empty() {
            return Poll::Pending;
        }
        let handed = &mut Handed::default();
        for key in keys {
            // A key may be gone, or taken since by a newer stream: looking again is harmless.
            if let Some(s) = self.streams.get_mut(key) {
                if !s.woken(state, handed) {
                    self.streams.remove(key);
                }
            }
        }
        Poll::Ready(())
    }

    /// Ends every stream (the server is stopping): the agents reconnect elsewhere, spread
    /// over the time this replica's open streams, when it began to stop, take at
    /// `agents.reconnect_per_second`.
    pub fn end_all(&mut self) {
        let spread = spread_value(self.fleet.stopping_spread());
        for mut s in self.streams.drain() {
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            trailers.insert(RECONNECT_SPREAD, spread.clone());
            let _ = s.send.send_trailers(trailers);
        }
    }
}
