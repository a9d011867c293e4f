package budgetagent

// Reporting what the calls did (SPEC §8): at the end of every window the reporter takes the
// counts and sends `Report` to the control plane, keeping what it could not deliver for the
// next report.
//
//   - Windows are aligned to wall-clock multiples of the report window (default 10 s). At each
//     window end the reporter takes every segment's counts (a window ending at that boundary)
//     and sends every pending window in one request, at a random moment within a quarter of
//     the window after the boundary (at most 2.5 s), so a fleet's reports do not reach the
//     control plane together. Counts are attributed to the window in
//     which they are taken: a call ending a few milliseconds after a boundary, before the take,
//     lands in the window before it.
//   - Every report carries 16 random bytes of its own (report_id). A request that fails
//     (control plane down, timeout, lost connection) may still have been stored, so it is kept
//     as it was, in doubt, and sent again first, with resend set and the same id and windows,
//     until it is answered: a control plane that stored it already answers without counting
//     it again. Meanwhile newer windows wait in pending, merged per segment and minute and
//     bounded (pending.go); they go in a report of their own once the one in doubt is
//     answered. A request answered INVALID_ARGUMENT (malformed) or UNIMPLEMENTED (a control
//     plane without Report) is dropped, as it would fail forever, and counted in
//     DroppedWindows.
//   - Nothing here runs on a call's path: calls only record into the counters (counts.go).
//     Failures are logged, the first of a series only.
//   - flush sends the window in progress now; when run's context ends, the last partial window
//     is sent, giving up after finalReportTimeout.
//
// Windows with no call are not sent. Windows of a report in doubt that grow too old for the
// control plane are dropped from it (and counted in DroppedWindows) before it is sent again.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
)

// finalReportTimeout is the longest the last report, sent when the agent stops, may take.
const finalReportTimeout = 2 * time.Second

// reportSender sends one Report request (with the agent's credentials, over its connection).
type reportSender func(ctx context.Context, req *pb.ReportRequest) (*pb.ReportResponse, error)

// ReportStats says how reporting is going, for health checks and tests.
type ReportStats struct {
	// Segments being counted (one set of counters each).
	Segments int
	// CountingBytes is about the memory the counters hold (histograms included).
	CountingBytes int
	// PendingWindows wait to be sent (one per segment and minute), with those of the report in
	// doubt (sent, not yet answered).
	PendingWindows int
	// SentWindows the control plane accepted.
	SentWindows uint64
	// DroppedWindows were given up: more than 11 minutes pending for a segment, too old for
	// the control plane (10 min), or refused (malformed, or no Report on the control plane).
	DroppedWindows uint64
	// FailedReports are requests that failed; their windows were kept.
	FailedReports uint64
}

// ReportError is why a report was not delivered.
type ReportError struct {
	// Refused is true when the control plane refused the windows (malformed, or it has no
	// Report) and they were dropped; false when the request failed and its windows were kept
	// for the next report.
	Refused bool
	Err     error
}

func (e *ReportError) Error() string {
	if e.Refused {
		return fmt.Sprintf("report refused, windows dropped: %v", e.Err)
	}
	return fmt.Sprintf("report failed, windows kept for the next one: %v", e.Err)
}

func (e *ReportError) Unwrap() error { return e.Err }

// reporter takes windows from the counters and sends them.
type reporter struct {
	agentID  string
	windowMs int64
	counters *counters
	send     reportSender
	log      Logger
	now      func() time.Time

	// sending holds one token: one request at a time, so a flush returns after everything
	// taken before it was sent.
	sending chan struct{}

	mu         sync.Mutex
	lastEndMs  int64 // the end of the last window taken; the next one starts there
	pending    *pending
	inDoubt    *sentReport // the report whose answer never came, sent again before anything newer
	sent       uint64
	failed     uint64
	failing    bool   // whether the last request failed, to log a series of failures once
	droppedLog uint64 // pending.dropped when last logged
}

// sentReport is a report as it was sent: its id and windows.
type sentReport struct {
	id      []byte
	windows []*pb.SegmentWindow
}

// newReporter makes a reporter of windows of the given length (zero: 10 s), which must be
// whole milliseconds dividing a minute. log may be nil.
func newReporter(agentID string, window time.Duration, c *counters, send reportSender, log Logger) (*reporter, error) {
	ms, err := windowMs(window)
	if err != nil {
		return nil, err
	}
	r := &reporter{
		agentID:  agentID,
		windowMs: ms,
		counters: c,
		send:     send,
		log:      log,
		now:      time.Now,
		sending:  make(chan struct{}, 1),
		pending:  newPending(log),
	}
	r.lastEndMs = r.now().UnixMilli()
	return r, nil
}

// run sends a report at every window boundary until ctx is done, then sends the last partial
// window (within finalReportTimeout) and returns.
func (r *reporter) run(ctx context.Context) {
	for {
		now := r.now().UnixMilli()
		boundary := windowFloor(now, r.windowMs) + r.windowMs
		if r.stoppedWithin(ctx, time.Duration(boundary-now)*time.Millisecond) {
			return
		}
		// Woken late (a suspended host): end at the last boundary passed.
		end := boundary
		if passed := windowFloor(r.now().UnixMilli(), r.windowMs); passed > end {
			end = passed
		}
		// The window is taken at its boundary and sent a little later, at a moment of this
		// agent's own, so a fleet's reports do not reach the server together.
		r.take(end, r.now().UnixMilli())
		if r.stoppedWithin(ctx, sendDelay(r.windowMs, randomPick)) {
			return
		}
		_ = r.deliver(ctx, r.sendTimeout())
	}
}

// stoppedWithin waits d unless ctx ends meanwhile: then it sends the last partial window and
// everything pending (within finalReportTimeout) and answers true.
func (r *reporter) stoppedWithin(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
		return false
	}
	final, cancel := context.WithTimeout(context.Background(), finalReportTimeout)
	defer cancel()
	_ = r.round(final, r.now().UnixMilli(), finalReportTimeout)
	return true
}

// maxSendDelayMs bounds how long a window waits after its boundary before it is sent (a
// quarter of the window at most; the send itself has half a window), so the next take is
// never late.
const maxSendDelayMs = 2500

// sendDelay is how long after a boundary the windows are sent: pick(max) milliseconds,
// uniform in 0..=max for the running agent, where max is a quarter of the window, at most
// maxSendDelayMs.
func sendDelay(windowMs int64, pick func(uint64) uint64) time.Duration {
	limit := windowMs / 4
	if limit > maxSendDelayMs {
		limit = maxSendDelayMs
	}
	if limit < 0 {
		limit = 0
	}
	d := pick(uint64(limit))
	if d > uint64(limit) {
		d = uint64(limit)
	}
	return time.Duration(d) * time.Millisecond
}

// flush sends the window in progress and everything pending now.
func (r *reporter) flush(ctx context.Context) error {
	return r.round(ctx, r.now().UnixMilli(), r.sendTimeout())
}

func (r *reporter) stats() ReportStats {
	segments, bytes := r.counters.footprint()
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReportStats{
		Segments:       segments,
		CountingBytes:  bytes,
		PendingWindows: r.pending.len() + r.inDoubtLen(),
		SentWindows:    r.sent,
		DroppedWindows: r.pending.dropped,
		FailedReports:  r.failed,
	}
}

// sendTimeout is half a window, within 1 s and 10 s: a slow request never delays the next
// take by a window.
func (r *reporter) sendTimeout() time.Duration {
	d := time.Duration(r.windowMs/2) * time.Millisecond
	if d < time.Second {
		return time.Second
	}
	if d > 10*time.Second {
		return 10 * time.Second
	}
	return d
}

// round takes the window ending at endMs, then sends every pending window within limit.
func (r *reporter) round(ctx context.Context, endMs int64, limit time.Duration) error {
	r.take(endMs, r.now().UnixMilli())
	return r.deliver(ctx, limit)
}

// inDoubtLen is the number of windows of the report in doubt. r.mu is held.
func (r *reporter) inDoubtLen() int {
	if r.inDoubt == nil {
		return 0
	}
	return len(r.inDoubt.windows)
}

// deliver sends the report in doubt, if any, then every pending window, within limit.
func (r *reporter) deliver(ctx context.Context, limit time.Duration) error {
	select {
	case r.sending <- struct{}{}:
	case <-ctx.Done():
		return &ReportError{Err: ctx.Err()}
	}
	defer func() { <-r.sending }()
	sendCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	r.mu.Lock()
	nowMs := r.now().UnixMilli()
	r.pending.dropStale(nowMs)
	// The report in doubt stays in place while it is sent (and so in ReportStats).
	doubt := r.freshPart(r.inDoubt, nowMs)
	r.inDoubt = doubt
	if d := r.pending.dropped; d > r.droppedLog {
		reportLogf(r.log, "budget agent: dropped %d report windows (%d in all): more than %d minutes pending, or too old to send",
			d-r.droppedLog, d, pendingMinutes)
		r.droppedLog = d
	}
	r.mu.Unlock()
	if doubt != nil {
		var refused *ReportError
		if err := r.sendReport(ctx, sendCtx, limit, doubt, true); err != nil && !(errors.As(err, &refused) && refused.Refused) {
			return err
		}
		// Too little time left for another request: the newer windows wait a round.
		if deadline, _ := sendCtx.Deadline(); time.Until(deadline) < limit/2 {
			return nil
		}
	}

	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return &ReportError{Err: fmt.Errorf("no random report id: %w", err)}
	}
	// In doubt from the moment it is sent until it is answered.
	r.mu.Lock()
	batch := r.pending.takeAll()
	report := &sentReport{id: id, windows: batch}
	if len(batch) > 0 {
		r.inDoubt = report
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return r.sendReport(ctx, sendCtx, limit, report, false)
}

// freshPart is doubt without the windows too old for the control plane (counted as dropped),
// or nil when none is left. r.mu is held.
func (r *reporter) freshPart(doubt *sentReport, nowMs int64) *sentReport {
	if doubt == nil {
		return nil
	}
	limit := nowMs - pendingMaxAgeMs
	var kept []*pb.SegmentWindow
	for _, w := range doubt.windows {
		if w.EndUnixMs < limit {
			r.pending.countRefused(1)
			continue
		}
		kept = append(kept, w)
	}
	if len(kept) == 0 {
		return nil
	}
	return &sentReport{id: doubt.id, windows: kept}
}

// sendReport sends report, the report in doubt, (again, with resend) within sendCtx. One
// answered or refused is no longer in doubt; one not answered stays so.
func (r *reporter) sendReport(ctx, sendCtx context.Context, limit time.Duration, report *sentReport, resend bool) error {
	n := len(report.windows)
	resp, err := r.send(sendCtx, &pb.ReportRequest{
		AgentId:  r.agentID,
		Windows:  report.windows,
		ReportId: report.id,
		Resend:   resend,
	})

	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		if accepted := resp.GetAcceptedWindows(); accepted != int64(n) {
			reportLogf(r.log, "budget agent: the control plane accepted %d of %d report windows", accepted, n)
		}
		if r.failing {
			reportLogf(r.log, "budget agent: report of %d windows delivered after failures", n)
		}
		r.failing = false
		r.sent += uint64(n)
		r.inDoubt = nil
		return nil
	}
	if code := status.Code(err); code == codes.InvalidArgument || code == codes.Unimplemented {
		r.pending.countRefused(n)
		r.droppedLog = r.pending.dropped
		// A control plane without Report refuses every report: say so once.
		if code != codes.Unimplemented || !r.failing {
			reportLogf(r.log, "budget agent: the control plane refused a report of %d windows; dropped: %v", n, err)
		}
		r.failing = code == codes.Unimplemented
		r.inDoubt = nil
		return &ReportError{Refused: true, Err: err}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up (the agent is stopping): not a failure of the control plane.
		return &ReportError{Err: ctx.Err()}
	}
	if errors.Is(sendCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("no answer within %v: %w", limit, err)
	}
	r.failed++
	if !r.failing {
		reportLogf(r.log, "budget agent: report failed, sending it again before newer windows (%d pending): %v", r.pending.len(), err)
		r.failing = true
	}
	return &ReportError{Err: err}
}

// take moves every segment's counts into pending windows. The window ends at endMs (a
// boundary) unless a flush already took past it, then at nowMs; it starts where the last one
// ended, but never before its own aligned window (so never in another minute).
func (r *reporter) take(endMs, nowMs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := endMs
	if end <= r.lastEndMs {
		end = nowMs
		if end <= r.lastEndMs {
			end = r.lastEndMs + 1
		}
	}
	start := windowFloor(end-1, r.windowMs)
	if r.lastEndMs > start {
		start = r.lastEndMs
	}
	for _, w := range r.counters.take(start, end) {
		r.pending.add(w)
	}
	r.lastEndMs = end
}
