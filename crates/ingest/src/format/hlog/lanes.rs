//! Decoding the interval lines of an hlog on several threads.
//!
//! Lines are independent until their counts are added into the per-tag totals, and adding is
//! order-free (each slot's sum saturates at `u64::MAX`, so the totals are the same whatever the
//! order). The calling thread reads the lines in order, checks their fields and numbers their
//! tags (`Log::interval`); the histograms (base64 → zlib → counts: almost all of the work) are
//! copied into a [`Batch`] of about [`Tuning::batch_bytes`] of base64 (or
//! [`Tuning::batch_lines`] lines). A full batch goes to a queue ([`Pool`]) shared with
//! `threads - 1` worker threads, started with the first full batch and ended with the parser.
//! Every thread takes a few lines at a time from the oldest batch, decodes them with its own
//! buffers and adds them to its own per-tag counts (a [`Lane`]). The calling thread does not
//! wait for a batch to be done: after queueing one it decodes lines too, until fewer than
//! [`QUEUED`] batches are left unfinished, then goes back to reading (so at most [`QUEUED`]
//! batches are queued or being decoded, besides the one being filled). Its lane holds the
//! parser's totals; the workers' counts are added into it at the end, or earlier, when a
//! worker's hold more than [`Tuning::worker_counts_max`] bytes: it then hands them over (the
//! calling thread adds them in when it next queues a batch) and starts again empty.
//!
//! Errors: every error of a line depends on that line alone, so the first bad line is the one
//! with the lowest number among the threads' errors. A thread stops its lines at an error (the
//! rest come after it); lines after the lowest error so far are dropped, those before it are
//! still decoded. The calling thread reports an error when it queues the next batch or at the
//! end, once every line before it has been decoded: an error is reported up to two batches of
//! input after its line was pushed.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use super::v2::{Decoder, Merged};
use super::{HISTOGRAM_FIELD, MAX_TAGS};
use crate::IngestError;

/// Most threads an hlog upload decodes on (the calling one included), whatever the machine:
/// each adds its own buffers and counts (see `Tuning::worker_counts_max`).
pub const MAX_THREADS: usize = 4;

/// Batches queued or being decoded past which the calling thread decodes instead of reading on.
const QUEUED: usize = 2;

/// How lines are batched and spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tuning {
    /// Threads decoding, the calling one included; 1: each line is decoded as it is read.
    pub threads: usize,
    /// A batch is queued once its base64 reaches this many bytes...
    pub batch_bytes: usize,
    /// ... or it holds this many lines.
    pub batch_lines: usize,
    /// Bytes of counts and buffers a worker keeps: past this it hands its counts over to the
    /// calling thread and releases its larger buffers.
    pub worker_counts_max: usize,
    /// Whether the calling thread decodes queued lines too (always, but in tests that need the
    /// workers to decode whatever the scheduling: then it only waits, once workers run).
    pub main_decodes: bool,
}

impl Tuning {
    /// The threads `std::thread::available_parallelism` allows (at most [`MAX_THREADS`]; 1 when
    /// it is 1 or unknown), batches of 256 KiB of base64 (about 200 lines of the benchmark, 2 ms
    /// of decoding).
    pub fn for_this_machine() -> Self {
        Self {
            threads: machine_threads(),
            batch_bytes: 256 << 10,
            batch_lines: 4096,
            worker_counts_max: 8 << 20,
            main_decodes: true,
        }
    }
}

/// `available_parallelism()`, at most [`MAX_THREADS`], asked once per process (it reads the
/// cgroup's CPU quota on every call).
fn machine_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, MAX_THREADS)
    })
}

/// A line's tag: its index in the lanes' counts, or `None` for a new tag past [`MAX_TAGS`]
/// (refused once the line's histogram header has been read, as one thread has it).
pub(super) type TagIndex = Option<usize>;

/// One interval line waiting for its histogram to be decoded.
#[derive(Debug, Clone)]
struct Job {
    no: u64,
    tag: TagIndex,
    /// Its base64 in [`Batch::text`].
    text: Range<usize>,
}

/// Lines read but not decoded yet, in line order.
#[derive(Debug, Default)]
pub(super) struct Batch {
    text: Vec<u8>,
    jobs: Vec<Job>,
    /// Lines a thread takes at once.
    grab: usize,
}

impl Batch {
    fn push(&mut self, no: u64, tag: TagIndex, b64: &[u8]) {
        let start = self.text.len();
        self.text.extend_from_slice(b64);
        self.jobs.push(Job {
            no,
            tag,
            text: start..self.text.len(),
        });
    }

    fn is_full(&self, tuning: &Tuning) -> bool {
        self.text.len() >= tuning.batch_bytes || self.jobs.len() >= tuning.batch_lines
    }

    /// Empties the batch, keeping at most `keep` bytes of its text buffer (a line of up to
    /// `MAX_LINE` bytes may have grown it).
    fn clear(&mut self, keep: usize) {
        self.text.clear();
        self.jobs.clear();
        if self.text.capacity() > keep {
            self.text = Vec::new();
        }
    }
}

/// One thread's decoding buffers and per-tag counts.
#[derive(Default)]
pub(super) struct Lane {
    pub decoder: Decoder,
    /// By tag index; the calling thread's lane has every tag, a worker's those it met.
    pub counts: Vec<Merged>,
    /// Bytes held by `counts`.
    held: usize,
    /// Interval lines this lane decoded.
    pub decoded: u64,
}

impl Lane {
    /// Decodes the histogram of line `no` and adds it to tag `tag`'s counts, each value clamped
    /// to `cap`; the errors of the one-thread parser, in the same order.
    pub fn line(
        &mut self,
        no: u64,
        tag: TagIndex,
        b64: &[u8],
        cap: u64,
    ) -> Result<(), IngestError> {
        let bad = |m: String| IngestError::at_line(no, m).field(HISTOGRAM_FIELD);
        let histogram = self.decoder.decode(b64).map_err(bad)?;
        let Some(tag) = tag else {
            return Err(
                IngestError::at_line(no, format!("more than {MAX_TAGS} distinct tags"))
                    .field("Tag"),
            );
        };
        if tag >= self.counts.len() {
            self.counts.resize_with(tag + 1, Merged::new);
            self.held = self.counts.iter().map(Merged::held_bytes).sum();
        }
        self.decoded += 1;
        let merged = &mut self.counts[tag];
        let before = merged.held_bytes();
        let added = merged.add(histogram, cap).map_err(bad);
        self.held = self.held + merged.held_bytes() - before;
        added
    }

    /// Decodes lines `range` of `batch`, up to the first bad one.
    fn lines(&mut self, batch: &Batch, range: Range<usize>, cap: u64) -> Result<(), IngestError> {
        for job in &batch.jobs[range] {
            self.line(job.no, job.tag, &batch.text[job.text.clone()], cap)?;
        }
        Ok(())
    }

    /// Adds `counts` (another lane's) into this lane's.
    pub fn absorb(&mut self, counts: &[Merged]) {
        if self.counts.len() < counts.len() {
            self.counts.resize_with(counts.len(), Merged::new);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(counts) {
            mine.absorb(theirs);
        }
        self.held = self.counts.iter().map(Merged::held_bytes).sum();
    }
}

/// What the threads share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Workers wait here for lines.
    work: Condvar,
    /// The calling thread waits here for a batch to be done.
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Batches with lines no thread has taken yet, oldest first.
    queue: VecDeque<Arc<Batch>>,
    /// The next line to take in the oldest batch.
    cursor: usize,
    /// Batches queued and not done yet (a batch is done when the thread that decoded its last
    /// lines lets go of it).
    unfinished: usize,
    /// The lowest bad line's error so far.
    error: Option<IngestError>,
    /// Counts handed over by workers past `worker_counts_max`.
    handed_over: Vec<Vec<Merged>>,
    /// Emptied batches, to be filled again.
    spare: Vec<Batch>,
    /// Set when the parser ends: workers return.
    stop: bool,
    /// A worker panicked while decoding (its lines are lost).
    lost: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// The next few lines to decode (the batch and their range in it), or `None` when none is
    /// left. Lines after the lowest error so far are dropped.
    fn take(&mut self, shared: &Shared) -> Option<(Arc<Batch>, Range<usize>)> {
        let front = self.queue.front()?;
        let start = self.cursor;
        if let Some(error) = &self.error {
            if Some(front.jobs[start].no) > error.line {
                for batch in std::mem::take(&mut self.queue) {
                    self.release(batch, shared);
                }
                self.cursor = 0;
                return None;
            }
        }
        let end = (start + front.grab).min(front.jobs.len());
        let batch = Arc::clone(front);
        if end == batch.jobs.len() {
            let front = self.queue.pop_front().expect("the front batch");
            self.release(front, shared);
            self.cursor = 0;
        } else {
            self.cursor = end;
        }
        Some((batch, start..end))
    }

    /// Lets go of a batch; when it was the last hold on it, the batch is done.
    fn release(&mut self, batch: Arc<Batch>, shared: &Shared) {
        if let Ok(mut batch) = Arc::try_unwrap(batch) {
            self.unfinished -= 1;
            if self.spare.len() < QUEUED {
                batch.clear(1 << 20);
                self.spare.push(batch);
            }
            shared.done.notify_one();
        }
    }

    /// Keeps the error of the lower line.
    fn record(&mut self, error: IngestError) {
        if self.error.as_ref().is_none_or(|e| error.line < e.line) {
            self.error = Some(error);
        }
    }
}

/// The batches and worker threads of a parser that decodes on several threads.
pub(super) struct Pool {
    tuning: Tuning,
    /// Largest value kept, in the log's unit.
    cap: u64,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<Lane>>,
    /// The batch being filled by the calling thread.
    filling: Batch,
    /// Interval lines queued.
    pub queued_lines: u64,
    /// Interval lines the workers decoded (known once they have ended).
    pub worker_lines: u64,
    /// Times a worker handed its counts over before the end.
    pub handovers: u64,
}

impl Pool {
    pub fn new(tuning: Tuning, cap: u64) -> Self {
        Self {
            tuning,
            cap,
            shared: Arc::default(),
            workers: Vec::new(),
            filling: Batch::default(),
            queued_lines: 0,
            worker_lines: 0,
            handovers: 0,
        }
    }

    /// Adds a line to the batch; a full batch is queued.
    pub fn push(
        &mut self,
        main: &mut Lane,
        no: u64,
        tag: TagIndex,
        b64: &[u8],
    ) -> Result<(), IngestError> {
        self.filling.push(no, tag, b64);
        if tag.is_none() {
            // an error at this line (or at its histogram's header), unless one comes before
            return self.drain(main);
        }
        if self.filling.is_full(&self.tuning) {
            if self.workers.is_empty() {
                self.start_workers();
            }
            self.queue_batch(main);
            self.decode(main, QUEUED);
            if self.shared.lock().error.is_some() {
                return self.drain(main);
            }
        }
        Ok(())
    }

    /// Decodes every line read so far and returns the first bad line's error, if any.
    pub fn drain(&mut self, main: &mut Lane) -> Result<(), IngestError> {
        self.queue_batch(main);
        self.decode(main, 1);
        match self.shared.lock().error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Decodes every line read so far, ends the workers and adds their counts into `main`'s;
    /// the first bad line's error, if any.
    pub fn finish(&mut self, main: &mut Lane) -> Result<(), IngestError> {
        let drained = self.drain(main);
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
        for worker in std::mem::take(&mut self.workers) {
            let lane = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            self.worker_lines += lane.decoded;
            main.absorb(&lane.counts);
        }
        self.take_handed_over(main);
        drained
    }

    /// Queues the batch being filled, when it has lines (before the first full batch, no
    /// worker has started: the calling thread decodes it alone).
    fn queue_batch(&mut self, main: &mut Lane) {
        if self.filling.jobs.is_empty() {
            return;
        }
        self.take_handed_over(main);
        let mut state = self.shared.lock();
        let next = state.spare.pop().unwrap_or_default();
        let mut batch = std::mem::replace(&mut self.filling, next);
        batch.grab = (batch.jobs.len() / 16).clamp(1, 8);
        self.queued_lines += batch.jobs.len() as u64;
        state.queue.push_back(Arc::new(batch));
        state.unfinished += 1;
        drop(state);
        self.shared.work.notify_all();
    }

    /// Decodes lines on the calling thread (waiting when every line is taken) until fewer
    /// than `unfinished` batches are left unfinished.
    fn decode(&mut self, main: &mut Lane, unfinished: usize) {
        let mut state = self.shared.lock();
        while state.unfinished >= unfinished {
            if state.lost {
                panic!("an hlog decoding thread panicked");
            }
            // Without workers (none started yet, or the system refused them) this thread is
            // the only one that can decode.
            let helps = self.tuning.main_decodes || self.workers.is_empty();
            let Some((batch, range)) = helps.then(|| state.take(&self.shared)).flatten() else {
                // (`take` may have finished batches: dropped after an error)
                if state.unfinished < unfinished {
                    break;
                }
                state = self
                    .shared
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            drop(state);
            let result = main.lines(&batch, range, self.cap);
            state = self.shared.lock();
            if let Err(e) = result {
                state.record(e);
            }
            state.release(batch, &self.shared);
        }
    }

    /// Adds the counts workers handed over into `main`'s.
    fn take_handed_over(&mut self, main: &mut Lane) {
        let handed = std::mem::take(&mut self.shared.lock().handed_over);
        for counts in handed {
            self.handovers += 1;
            main.absorb(&counts);
        }
    }

    /// Starts `threads - 1` workers (fewer when the system will not start them: the calling
    /// thread decodes whatever they do not).
    fn start_workers(&mut self) {
        for _ in 1..self.tuning.threads {
            let shared = Arc::clone(&self.shared);
            let (max, cap) = (self.tuning.worker_counts_max, self.cap);
            let started = std::thread::Builder::new()
                .name("hlog-decode".into())
                .spawn(move || work(&shared, max, cap));
            match started {
                Ok(worker) => self.workers.push(worker),
                Err(_) => break,
            }
        }
    }
}

impl Drop for Pool {
    /// Workers of a parser dropped before its end return after their current lines; they are
    /// not waited for (the parser may be dropped on an async runtime's thread).
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.stop = true;
        state.queue.clear();
        drop(state);
        self.shared.work.notify_all();
    }
}

/// A worker: decodes the lines it takes into its own lane until the parser ends, and returns
/// the lane.
fn work(shared: &Shared, max: usize, cap: u64) -> Lane {
    /// Tells the calling thread when the worker panicked with lines in hand.
    struct Panicked<'a>(&'a Shared);
    impl Drop for Panicked<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.lock().lost = true;
                self.0.done.notify_all();
            }
        }
    }
    let _panicked = Panicked(shared);
    let mut lane = Lane::default();
    let mut state = shared.lock();
    loop {
        if state.stop {
            return lane;
        }
        let Some((batch, range)) = state.take(shared) else {
            state = shared
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        drop(state);
        let result = lane.lines(&batch, range, cap);
        let handed = (lane.held > max).then(|| {
            lane.held = 0;
            std::mem::take(&mut lane.counts)
        });
        lane.decoder.release_over(max);
        state = shared.lock();
        if let Err(e) = result {
            state.record(e);
        }
        state.handed_over.extend(handed);
        state.release(batch, shared);
    }
}
