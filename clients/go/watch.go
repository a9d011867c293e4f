package budgetagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// The watch + ACK protocol (xDS-style) and the goroutine that keeps the live config current.
// Watch is opened from the revision held; every update is validated (applyUpdate): a good one
// is put in force, cached and ACKed, a bad one NACKed while the previous config stays. A
// stream that ends or breaks is reopened forever, next endpoint first, after a
// reconnectBackoff delay.

// watcher owns the connection to the control plane: the endpoint in use, its gRPC
// connection (shared with the reporter), and what the agent asks for.
type watcher struct {
	opts      *Options
	endpoints []endpoint
	dialOpts  []grpc.DialOption
	// ctx lives as long as the agent; stop cancels it, ending the stream and the goroutine.
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	current int
	conn    *grpc.ClientConn
}

// watchStream is an open Watch stream; cancel closes it. spread is the reconnect spread its
// replica asked for in the headers (0 when none).
type watchStream struct {
	updates pb.BudgetControl_WatchClient
	cancel  context.CancelFunc
	spread  time.Duration
}

func newWatcher(opts *Options) (*watcher, error) {
	list, err := opts.endpoints()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := opts.tlsConfig(list)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &watcher{opts: opts, endpoints: list, dialOpts: opts.dialOptions(tlsConfig), ctx: ctx, stop: stop}, nil
}

// use makes endpoint i the current one, with a fresh connection (made on first use).
func (w *watcher) use(i int) error {
	conn, err := grpc.DialContext(w.ctx, w.endpoints[i].target, w.dialOpts...)
	if err != nil {
		return fmt.Errorf("cannot dial %s: %v", w.endpoints[i].url, err)
	}
	w.mu.Lock()
	old := w.conn
	w.current, w.conn = i, conn
	w.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// rotate moves to the next endpoint (wrapping) when there are several; with one, its
// connection reconnects by itself.
func (w *watcher) rotate() {
	if len(w.endpoints) < 2 {
		return
	}
	w.mu.Lock()
	next := (w.current + 1) % len(w.endpoints)
	w.mu.Unlock()
	if err := w.use(next); err != nil {
		w.opts.Logger.Printf("%v", err)
	}
}

func (w *watcher) client() (pb.BudgetControlClient, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pb.NewBudgetControlClient(w.conn), w.endpoints[w.current].url
}

// errClosed is a report's error once the agent is closed.
var errClosed = errors.New("budgetagent: the agent is closed")

// report sends a report over the connection in use: the reporter's sender. After close there
// is none (FlushReport after Close, or racing it).
func (w *watcher) report(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error) {
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	if conn == nil {
		return nil, errClosed
	}
	return pb.NewBudgetControlClient(conn).Report(ctx, req)
}

// close ends the connection; call it once nothing uses the watcher any more.
func (w *watcher) close() {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// maxKnownChains is the most chains a Watch names as held (KnownChains).
const maxKnownChains = 256

// request asks for the chains watched from known, the config the agent has (nil: none yet).
// The chains it holds go with its revision, so that a chain it lacks (added to Chains since
// the cache was written) is sent however old its publication.
func (w *watcher) request(known *Snapshot) *pb.WatchRequest {
	req := &pb.WatchRequest{
		AgentId: w.opts.AgentID,
		Service: w.opts.Service,
		Chains:  w.opts.Chains,
		Labels:  w.opts.Labels,
		Client:  "go/" + Version,
	}
	if known != nil && known.Revision > 0 && len(known.Chains) > 0 {
		req.KnownRevision = known.Revision
		// More than the server takes go as none: every chain then counts as held.
		if len(known.Chains) <= maxKnownChains {
			for name := range known.Chains {
				req.KnownChains = append(req.KnownChains, name)
			}
			sort.Strings(req.KnownChains)
		}
	}
	return req
}

// firstConfig is the first update from the first endpoint that gives one, trying each in
// order. The error joins one reason per endpoint, for the log and ErrUnavailable.
func (w *watcher) firstConfig(ctx context.Context) (*watchStream, *pb.BudgetUpdate, error) {
	var reasons []string
	for i := range w.endpoints {
		if err := w.use(i); err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		s, err := w.open(ctx.Done(), nil, w.opts.ConnectTimeout)
		if err == nil {
			var update *pb.BudgetUpdate
			if update, err = w.recvFirst(ctx.Done(), s); err == nil {
				return s, update, nil
			}
			s.cancel()
		}
		reasons = append(reasons, err.Error())
		if ctx.Err() != nil {
			reasons = append(reasons, "start cancelled: "+ctx.Err().Error())
			break
		}
	}
	return nil, nil, errors.New(strings.Join(reasons, "; "))
}

// open opens Watch on the current endpoint from knownRevision and waits for the server's
// answer (its response headers) within limit, or until abort is closed.
func (w *watcher) open(abort <-chan struct{}, known *Snapshot, limit time.Duration) (*watchStream, error) {
	client, target := w.client()
	ctx, cancel := context.WithCancel(w.ctx)
	timer := time.AfterFunc(limit, cancel)
	defer cancelOn(abort, cancel)()
	updates, err := client.Watch(ctx, w.request(known))
	var header metadata.MD
	if err == nil {
		header, err = updates.Header()
	}
	expired := !timer.Stop()
	switch {
	case expired:
		cancel()
		return nil, fmt.Errorf("no answer from %s within %v", target, limit)
	case err != nil:
		cancel()
		return nil, fmt.Errorf("watch on %s failed: %s", target, statusLine(err))
	}
	spread, _ := spreadIn(header)
	return &watchStream{updates: updates, cancel: cancel, spread: spread}, nil
}

// recvFirst waits for the first update of a stream just opened, within FirstConfigTimeout,
// or until abort is closed.
func (w *watcher) recvFirst(abort <-chan struct{}, s *watchStream) (*pb.BudgetUpdate, error) {
	_, target := w.client()
	timer := time.AfterFunc(w.opts.FirstConfigTimeout, s.cancel)
	defer cancelOn(abort, s.cancel)()
	update, err := s.updates.Recv()
	if !timer.Stop() {
		return nil, fmt.Errorf("no config from %s within %v", target, w.opts.FirstConfigTimeout)
	}
	switch {
	case err == io.EOF:
		return nil, fmt.Errorf("watch on %s ended before the first config", target)
	case err != nil:
		return nil, fmt.Errorf("watch on %s failed: %s", target, statusLine(err))
	}
	return update, nil
}

// acceptFirst validates the first config: cached and ACKed when good, NACKed and refused when
// not (a service refuses to start with an inverted config).
func (w *watcher) acceptFirst(update *pb.BudgetUpdate) (*Snapshot, *Refusal) {
	revision := update.GetRevision()
	snapshot, refusal := applyUpdate(&Snapshot{Chains: map[string]*Chain{}}, update)
	if refusal != nil {
		w.opts.Logger.Printf("refusing to start with the budgets received (revision %d): %s", revision, nackText(refusal))
		w.ack(revision, refusal)
		return nil, refusal
	}
	w.save(snapshot)
	w.ack(revision, nil)
	w.opts.Logger.Printf("started with budgets from the control plane (revision %d, %d chain(s))", revision, len(snapshot.Chains))
	return snapshot, nil
}

// handle validates and applies one update: put in force, cached and ACKed, or NACKed while
// the old config stays.
func (w *watcher) handle(l *live, update *pb.BudgetUpdate) {
	revision := update.GetRevision()
	cur := l.current()
	next, refusal := applyUpdate(cur, update)
	if refusal != nil {
		w.opts.Logger.Printf("refused new budgets (revision %d), keeping revision %d: %s", revision, cur.Revision, nackText(refusal))
		l.refuse(revision, refusal)
		w.ack(revision, refusal)
		return
	}
	// Equal: chains the agent lacked at its revision, sent on resume.
	if revision < cur.Revision {
		w.opts.Logger.Printf("revision went back: %d after %d", revision, cur.Revision)
	}
	l.publish(next)
	w.opts.Logger.Printf("applied new budgets (revision %d)", revision)
	w.save(next)
	w.ack(revision, nil)
}

// ack sends the ACK (refusal nil) or NACK of revision; a failure is only logged.
func (w *watcher) ack(revision int64, refusal *Refusal) {
	req := &pb.AckRequest{AgentId: w.opts.AgentID, Revision: revision, Accepted: refusal == nil}
	if refusal != nil {
		req.Error = nackText(refusal)
	}
	limit := w.opts.FirstConfigTimeout
	if limit < time.Second {
		limit = time.Second
	}
	ctx, cancel := context.WithTimeout(w.ctx, limit)
	defer cancel()
	client, _ := w.client()
	if _, err := client.Ack(ctx, req); err != nil {
		w.opts.Logger.Printf("failed to acknowledge revision %d: %s", revision, statusLine(err))
	}
}

// maxNackErrorBytes bounds a NACK's text, and the log line of a refusal: the control plane
// keeps this much of it, and the text of a config with thousands of findings (one message per
// extra root names every root) would otherwise grow with the square of its segments.
const maxNackErrorBytes = 4096

// nackText is the refusal's text cut to maxNackErrorBytes, at a character boundary.
func nackText(r *Refusal) string {
	text := r.Error()
	if len(text) <= maxNackErrorBytes {
		return text
	}
	cut := maxNackErrorBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// save writes snapshot to the cache when a cache path is set; a failure is only logged.
func (w *watcher) save(s *Snapshot) {
	if w.opts.CachePath == "" {
		return
	}
	if err := WriteCache(w.opts.CachePath, s); err != nil {
		w.opts.Logger.Printf("failed to cache the budgets (revision %d): %v", s.Revision, err)
	}
}

// run follows the stream start opened (nil when the agent started from its cache),
// reconnecting forever, until stop.
func (w *watcher) run(l *live, s *watchStream) {
	backoff := reconnectBackoff{base: reconnectBase, cap: reconnectCap}
	failing := false
	// The spread the replica of the last stream asked for in its headers: taken after a failed
	// attempt (the replica is down, its fleet is retrying), not at once (a broken connection of
	// this agent alone comes back quickly).
	var asked time.Duration
	for {
		if s != nil {
			opened := time.Now()
			asked = s.spread
			var endedByReplica time.Duration
			for {
				update, err := s.updates.Recv()
				if err != nil {
					if w.ctx.Err() != nil {
						s.cancel()
						return
					}
					if err == io.EOF {
						w.opts.Logger.Printf("watch stream ended; reconnecting")
						endedByReplica, _ = spreadIn(s.updates.Trailer())
					} else {
						w.opts.Logger.Printf("watch stream failed: %s; reconnecting", statusLine(err))
					}
					break
				}
				backoff.reset()
				w.handle(l, update)
			}
			s.cancel()
			s = nil
			if time.Since(opened) >= reconnectCap {
				backoff.reset()
			}
			// The replica stopped and told its whole fleet to spread out: so does this agent,
			// from the spread (the stream's end was no failure of this agent's).
			if endedByReplica > 0 {
				backoff.reset()
				backoff.spreadOver(endedByReplica)
			}
			// The replica went away or broke the stream: try the next one first.
			w.rotate()
		}
		sleep(w.ctx, backoff.next(randomPick))
		if w.ctx.Err() != nil {
			return
		}
		known := l.current()
		next, err := w.open(nil, known, w.opts.ConnectTimeout+w.opts.FirstConfigTimeout)
		if err == nil {
			w.opts.Logger.Printf("watch stream open (known revision %d)", known.Revision)
			s, failing = next, false
			continue
		}
		if w.ctx.Err() != nil {
			return
		}
		backoff.spreadOver(asked)
		if !failing {
			w.opts.Logger.Printf("cannot watch the control plane: %v; retrying with backoff", err)
			failing = true
		}
		w.rotate()
	}
}

// cancelOn calls cancel if abort is closed before the returned function is called.
func cancelOn(abort <-chan struct{}, cancel context.CancelFunc) (done func()) {
	if abort == nil {
		return func() {}
	}
	finished := make(chan struct{})
	go func() {
		select {
		case <-abort:
			cancel()
		case <-finished:
		}
	}()
	return func() { close(finished) }
}

// statusLine is a gRPC error on one line: its code and message.
func statusLine(err error) string {
	s := status.Convert(err)
	return fmt.Sprintf("%s: %s", s.Code(), s.Message())
}

// The reconnect backoff of the watch stream: 100 ms doubling to a 10 s cap.
const (
	reconnectBase = 100 * time.Millisecond
	reconnectCap  = 10 * time.Second
)

// spreadKey is the response metadata in which a replica asks its agents to spread their
// reconnects (milliseconds): in a Watch stream's headers, and in the trailers of a stream it
// ends because it stops. maxSpread is the longest spread taken.
const (
	spreadKey = "budget-reconnect-spread-ms"
	maxSpread = time.Minute
)

// spreadIn is the spread md asks for; false when it has none or not a whole number of
// milliseconds.
func spreadIn(md metadata.MD) (time.Duration, bool) {
	values := md.Get(spreadKey)
	if len(values) == 0 {
		return 0, false
	}
	return parseSpread(values[0])
}

// parseSpread reads one budget-reconnect-spread-ms value; larger than maxSpread counts as it.
func parseSpread(value string) (time.Duration, bool) {
	ms, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return 0, false
	}
	if ms > uint64(maxSpread/time.Millisecond) {
		return maxSpread, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// reconnectBackoff is exponential with full jitter: each delay is uniform in
// 0..=min(cap, base × 2^failures), from the spread the replica asked for when longer
// (spreadOver), so a fleet whose replica restarts comes back at the rate it asked for instead
// of together. Apart from R-retry on purpose: that backs off a call inside its budget, this
// backs off reconnecting to the control plane, forever.
type reconnectBackoff struct {
	base, cap time.Duration
	failures  uint
	spread    time.Duration
}

// ceiling is the next delay before jitter: min(cap, base × 2^failures), where a spread asked
// for takes the place of base when longer, and of cap when longer.
func (b *reconnectBackoff) ceiling() time.Duration {
	base, limit := b.base, b.cap
	if b.spread > base {
		base = b.spread
	}
	if b.spread > limit {
		limit = b.spread
	}
	d := base
	for i := uint(0); i < b.failures && d < limit; i++ {
		d *= 2
	}
	if d > limit {
		d = limit
	}
	return d
}

// spreadOver makes over (at most maxSpread) the base of the ceilings until the next healthy
// stream. (Not held at over: agents retrying every 0..=over while the replica is down would
// come back twice as fast as asked the moment it is up, as the time to each one's next try is
// most often short.) A longer spread than the one in force starts the doubling again; zero, or
// the same spread again, leaves the backoff as it is.
func (b *reconnectBackoff) spreadOver(over time.Duration) {
	if over > maxSpread {
		over = maxSpread
	}
	if over > b.spread {
		b.spread, b.failures = over, 0
	}
}

// next is the next delay; pick(max) returns a value in 0..=max (microseconds).
func (b *reconnectBackoff) next(pick func(max uint64) uint64) time.Duration {
	max := uint64(b.ceiling() / time.Microsecond)
	b.failures++
	if b.failures > 64 {
		b.failures = 64
	}
	us := pick(max)
	if us > max {
		us = max
	}
	return time.Duration(us) * time.Microsecond
}

// reset starts again from the base, with no spread, after a healthy stream.
func (b *reconnectBackoff) reset() { b.failures, b.spread = 0, 0 }
