package budgetagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Source is where the config an agent started with came from.
type Source int

const (
	// SourceControlPlane is the first update of the control plane's watch stream.
	SourceControlPlane Source = iota + 1
	// SourceCache is the disk cache: the control plane was unreachable at start.
	SourceCache
	// SourceStatic is a snapshot given to FromSnapshot; never updated.
	SourceStatic
)

func (s Source) String() string {
	switch s {
	case SourceControlPlane:
		return "control plane"
	case SourceCache:
		return "cache"
	case SourceStatic:
		return "static"
	default:
		return fmt.Sprintf("Source(%d)", int(s))
	}
}

// ErrUnavailable is returned (wrapped, with the reasons) by Start when neither the control
// plane nor a usable cache gave a config.
var ErrUnavailable = errors.New("budgetagent: no budgets: control plane unavailable and no usable cached config")

// unavailable is Start's error when neither the control plane nor a cache gave a config: it
// matches ErrUnavailable, and unwraps to the cache's error (e.g. fs.ErrNotExist, a
// *CacheFormatError) when there was a cache path.
type unavailable struct {
	reason string
	cache  error
}

func (e *unavailable) Error() string { return ErrUnavailable.Error() + " (" + e.reason + ")" }

func (e *unavailable) Is(target error) bool { return target == ErrUnavailable }

func (e *unavailable) Unwrap() error { return e.cache }

// Agent is the client library a service embeds: it follows the live budgets of its chains
// and runs downstream calls under them. It is safe for concurrent use; Close stops it.
type Agent struct {
	opts     Options
	source   Source
	live     *live
	counters *counters
	// watcher and reporter are nil for a static agent.
	watcher  *watcher
	reporter *reporter

	stopReport context.CancelFunc
	running    sync.WaitGroup // the reporter
	following  sync.WaitGroup // the watch goroutine
	closeOnce  sync.Once
}

// Start connects to the control plane, watches the budgets and waits for the first config.
//
//   - A first config with an error finding (e.g. an inversion) is NACKed and refused: the
//     error wraps the *Refusal, with its numbers; a service refuses to start with it.
//   - A good one is ACKed, cached, and kept current by a goroutine that reconnects forever
//     (exponential backoff with full jitter, next endpoint first) and NACKs any later bad
//     config, keeping the previous one.
//   - When no stream opens within ConnectTimeout, or no config arrives within
//     FirstConfigTimeout, on every endpoint (or ctx ends first), the agent starts from
//     CachePath (validated the same way; an invalid cache is refused) and keeps trying in the
//     background; without a usable cache the error wraps ErrUnavailable.
//   - Another goroutine reports what the calls did every ReportWindow (SPEC §8).
func Start(ctx context.Context, opts Options) (*Agent, error) {
	a := &Agent{opts: opts.withDefaults()}
	if err := a.opts.check(); err != nil {
		return nil, err
	}
	w, err := newWatcher(&a.opts)
	if err != nil {
		return nil, err
	}
	a.watcher, a.counters = w, newCounters(a.opts.Metrics)
	a.reporter, err = newReporter(a.opts.AgentID, a.opts.ReportWindow, a.counters, w.report, a.opts.Logger)
	if err != nil {
		w.close()
		return nil, configError("ReportWindow: %v", err)
	}
	stream, snapshot, err := a.first(ctx)
	if err != nil {
		w.close()
		return nil, err
	}
	a.live = newLive(snapshot)
	a.following.Add(1)
	go func() {
		defer a.following.Done()
		w.run(a.live, stream)
	}()
	reportCtx, stop := context.WithCancel(context.Background())
	a.stopReport = stop
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		a.reporter.run(reportCtx)
	}()
	return a, nil
}

// first is the config the agent starts with: the control plane's first update (with its
// open stream), else the cache's.
func (a *Agent) first(ctx context.Context) (*watchStream, *Snapshot, error) {
	w := a.watcher
	stream, update, reason := w.firstConfig(ctx)
	if reason == nil {
		snapshot, refusal := w.acceptFirst(update)
		if refusal != nil {
			stream.cancel()
			return nil, nil, fmt.Errorf("budgetagent: refusing to start with the budgets received: %w", refusal)
		}
		a.source = SourceControlPlane
		return stream, snapshot, nil
	}
	if a.opts.CachePath == "" {
		return nil, nil, &unavailable{reason: reason.Error() + "; no cache path set"}
	}
	snapshot, err := ReadCache(a.opts.CachePath)
	if err != nil {
		return nil, nil, &unavailable{reason: reason.Error() + "; " + err.Error(), cache: err}
	}
	if err := snapshot.Check(); err != nil {
		a.opts.Logger.Printf("refusing to start with the cached budgets (revision %d): %v", snapshot.Revision, err)
		return nil, nil, fmt.Errorf("budgetagent: refusing to start with the cached budgets: %w", err)
	}
	a.opts.Logger.Printf("control plane unavailable (%v); starting from the cached budgets (revision %d)", reason, snapshot.Revision)
	a.source = SourceCache
	return nil, snapshot, nil
}

// FromSnapshot is an agent over a fixed snapshot, with no control plane: for tests,
// examples and tools. The snapshot is validated like any received config. Its calls are
// counted (and seen by opts.Metrics) but never reported; only opts' Metrics, Classify and
// Logger are used.
func FromSnapshot(s *Snapshot, opts Options) (*Agent, error) {
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("budgetagent: refusing the snapshot: %w", err)
	}
	opts = opts.withDefaults()
	return &Agent{opts: opts, source: SourceStatic, live: newLive(s), counters: newCounters(opts.Metrics)}, nil
}

// Close stops following the control plane and sends the last partial reporting window
// (best effort, bounded). The live config stays readable but no longer changes. Calling it
// again does nothing.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		if a.stopReport != nil {
			a.stopReport()
			a.running.Wait()
		}
		if a.watcher != nil {
			a.watcher.stop()
			a.following.Wait()
			a.watcher.close()
		}
	})
	return nil
}

// Source says where the config the agent started with came from.
func (a *Agent) Source() Source { return a.source }

// Snapshot is the live config now. It is shared: read it, never modify it.
func (a *Agent) Snapshot() *Snapshot { return a.live.current() }

// LastRefusal is the last config refused (NACKed) since start and its revision; nil when
// none was.
func (a *Agent) LastRefusal() (revision int64, refusal *Refusal) { return a.live.lastRefusal() }

// Deadline is a child of ctx whose deadline is the earlier of ctx's own and now + segment's
// budget (retries included): the deadline to hand the downstream call of segment. For a
// segment the live config does not know, the child keeps ctx's deadline.
func (a *Agent) Deadline(ctx context.Context, segment string) (context.Context, context.CancelFunc) {
	_, seg, ok := a.Snapshot().Segment(segment)
	if !ok {
		return context.WithCancel(ctx)
	}
	inherited, has := ctx.Deadline()
	budget := time.Duration(seg.BudgetMs) * time.Millisecond
	return context.WithDeadline(ctx, Earliest(time.Now(), budget, inherited, has))
}

// errNoControlPlane is FlushReport's error on a static agent.
var errNoControlPlane = errors.New("budgetagent: no control plane to report to (static agent)")

// FlushReport sends the window in progress now, with every window still pending, and waits
// for the answer within ctx. On failure the windows stay pending for the next report. For a
// graceful shutdown Close does the same, best effort; after Close it fails.
func (a *Agent) FlushReport(ctx context.Context) error {
	if a.reporter == nil {
		return errNoControlPlane
	}
	return a.reporter.flush(ctx)
}

// ReportStats says how reporting is going: segments counted, windows pending, sent and
// dropped, failed requests. Zero for a static agent.
func (a *Agent) ReportStats() ReportStats {
	if a.reporter == nil {
		return ReportStats{}
	}
	return a.reporter.stats()
}

// live is the config in force, shared by the Agent's readers and the watch goroutine (its
// only writer), and the last config refused.
type live struct {
	snapshot atomic.Pointer[Snapshot]

	mu              sync.Mutex
	refusedRevision int64
	refusal         *Refusal
}

func newLive(s *Snapshot) *live {
	l := &live{}
	l.snapshot.Store(s)
	return l
}

func (l *live) current() *Snapshot { return l.snapshot.Load() }

func (l *live) publish(s *Snapshot) { l.snapshot.Store(s) }

func (l *live) refuse(revision int64, r *Refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusedRevision, l.refusal = revision, r
}

func (l *live) lastRefusal() (int64, *Refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusedRevision, l.refusal
}
