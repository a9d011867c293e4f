package budgetagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
	"github.com/budgetd/budgetd/clients/go/internal/wire"
)

// Start and the watch goroutine against an in-process fake BudgetControl (real gRPC on
// loopback), with short timeouts.

// fakeControl publishes what a test tells it and records what agents send.
type fakeControl struct {
	pb.UnimplementedBudgetControlServer
	addr string

	mu      sync.Mutex
	updates []*pb.BudgetUpdate
	silent  bool          // accept watches, send nothing
	changed chan struct{} // closed (and replaced) on every publication or drop
	dropped int           // streams opened before a drop end with UNAVAILABLE
	spread  string        // set: a drop ends streams with OK, asking this reconnect spread
	watches []watchSeen
	acks    []*pb.AckRequest
	open    int
}

type watchSeen struct {
	req  *pb.WatchRequest
	auth string
}

// fakeCodec is the server side of wire.Codec (the old grpc.Codec form a ServerOption takes).
type fakeCodec struct{ wire.Codec }

func (fakeCodec) String() string { return "proto" }

func serveFake(t *testing.T, opts ...grpc.ServerOption) *fakeControl {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControl{addr: l.Addr().String(), changed: make(chan struct{})}
	s := grpc.NewServer(append(opts, grpc.CustomCodec(fakeCodec{}))...)
	pb.RegisterBudgetControlServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return f
}

func (f *fakeControl) url() string { return "http://" + f.addr }

func (f *fakeControl) publish(u *pb.BudgetUpdate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, u)
	close(f.changed)
	f.changed = make(chan struct{})
}

// dropStreams ends every open stream with UNAVAILABLE, as a replica going away.
func (f *fakeControl) dropStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped++
	close(f.changed)
	f.changed = make(chan struct{})
}

// endStreamsAsking ends every open stream as a stopping replica does: status OK, with
// trailers asking the agents to spread their reconnects over ms milliseconds.
func (f *fakeControl) endStreamsAsking(ms string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spread = ms
	f.dropped++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeControl) Watch(req *pb.WatchRequest, stream pb.BudgetControl_WatchServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	f.mu.Lock()
	f.watches = append(f.watches, watchSeen{req: proto.Clone(req).(*pb.WatchRequest), auth: strings.Join(md.Get("authorization"), ",")})
	f.open++
	generation := f.dropped
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.open--
		f.mu.Unlock()
	}()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	sent := req.GetKnownRevision()
	for {
		f.mu.Lock()
		var due []*pb.BudgetUpdate
		for _, u := range f.updates {
			if u.GetRevision() > sent && !f.silent {
				due = append(due, u)
			}
		}
		changed, drop, spread := f.changed, f.dropped != generation, f.spread
		f.mu.Unlock()
		if drop && spread != "" {
			stream.SetTrailer(metadata.Pairs(spreadKey, spread))
			return nil
		}
		if drop {
			return status.Error(codes.Unavailable, "replica going away")
		}
		for _, u := range due {
			if err := stream.Send(u); err != nil {
				return err
			}
			sent = u.GetRevision()
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (f *fakeControl) Ack(_ context.Context, req *pb.AckRequest) (*pb.AckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, proto.Clone(req).(*pb.AckRequest))
	return &pb.AckResponse{}, nil
}

func (f *fakeControl) seenAcks() []*pb.AckRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.AckRequest{}, f.acks...)
}

func (f *fakeControl) seenWatches() []watchSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]watchSeen{}, f.watches...)
}

func (f *fakeControl) openStreams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

func fakeOptions(cachePath string, endpoints ...string) Options {
	return Options{
		Endpoints:          endpoints,
		Token:              "s3cret-agent-token",
		AgentID:            "order-1",
		Service:            "order",
		Labels:             map[string]string{"host": "test"},
		CachePath:          cachePath,
		ConnectTimeout:     500 * time.Millisecond,
		FirstConfigTimeout: 500 * time.Millisecond,
		Logger:             &syncLog{},
	}
}

func TestWatchesAcksNacksAndReconnects(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	cachePath := filepath.Join(t.TempDir(), "budgets.json")
	a := startAgent(t, fakeOptions(cachePath, f.url()))
	if a.Source() != SourceControlPlane || a.Snapshot().Revision != 7 || budgetOf(t, a, inv) != 208 {
		t.Fatalf("started from %v at revision %d", a.Source(), a.Snapshot().Revision)
	}
	if got := cachedRevision(cachePath); got != 7 {
		t.Fatalf("cached revision %d", got)
	}
	w := f.seenWatches()[0]
	if w.auth != "Bearer s3cret-agent-token" || w.req.GetAgentId() != "order-1" || w.req.GetService() != "order" ||
		w.req.GetKnownRevision() != 0 || len(w.req.GetKnownChains()) != 0 || w.req.GetLabels()["host"] != "test" || w.req.GetClient() != "go/"+Version {
		t.Fatalf("watch %v with %q", w.req, w.auth)
	}
	eventually(t, "the ACK", 5*time.Second, func() bool { return len(f.seenAcks()) == 1 })
	if ack := f.seenAcks()[0]; ack.GetRevision() != 7 || !ack.GetAccepted() || ack.GetError() != "" {
		t.Fatalf("ack %v", ack)
	}

	// An inverted config is NACKed with its numbers; the agent keeps revision 7.
	f.publish(update(8, checkout(t, "example-b-inverted")))
	eventually(t, "the NACK", 5*time.Second, func() bool { return len(f.seenAcks()) == 2 })
	if nack := f.seenAcks()[1]; nack.GetRevision() != 8 || nack.GetAccepted() ||
		!strings.Contains(nack.GetError(), "909") || !strings.Contains(nack.GetError(), "109") {
		t.Fatalf("nack %v", nack)
	}
	if rev, r := a.LastRefusal(); a.Snapshot().Revision != 7 || rev != 8 || r.Segment != "gateway->order" {
		t.Fatalf("revision %d, last refusal %d %v", a.Snapshot().Revision, rev, r)
	}

	// A good one is ACKed, applied and cached, with no temporary file left beside it.
	next := checkout(t, "example-a")
	next.Segments[3].TimeoutMs, next.Segments[3].BudgetMs = 12, 12
	f.publish(update(9, next))
	eventually(t, "revision 9", 5*time.Second, func() bool { return a.Snapshot().Revision == 9 })
	if budgetOf(t, a, user) != 12 {
		t.Fatalf("user budget %d", budgetOf(t, a, user))
	}
	eventually(t, "the cache at 9", 5*time.Second, func() bool { return cachedRevision(cachePath) == 9 })
	eventually(t, "the third ACK", 5*time.Second, func() bool { return len(f.seenAcks()) == 3 })
	if files, _ := os.ReadDir(filepath.Dir(cachePath)); len(files) != 1 {
		t.Errorf("files beside the cache: %v", files)
	}

	// The stream breaks: the agent reconnects, resuming from what it has.
	f.dropStreams()
	eventually(t, "a second watch", 5*time.Second, func() bool { return len(f.seenWatches()) == 2 })
	// With the chains its config holds: a chain it lacks would be sent whatever its revision.
	if resumed := f.seenWatches()[1].req; resumed.GetKnownRevision() != 9 ||
		strings.Join(resumed.GetKnownChains(), ",") != "checkout" {
		t.Fatalf("resumed from %d holding %v", resumed.GetKnownRevision(), resumed.GetKnownChains())
	}
	eventually(t, "the new stream", 5*time.Second, func() bool { return f.openStreams() == 1 })
	if len(f.seenAcks()) != 3 {
		t.Fatal("a revision was acknowledged twice")
	}

	// Close ends the stream.
	must(t, a.Close())
	eventually(t, "the stream to close", 5*time.Second, func() bool { return f.openStreams() == 0 })
}

func TestStartRefusesAnInvertedFirstConfig(t *testing.T) {
	f := serveFake(t)
	f.publish(update(8, checkout(t, "example-b-inverted")))
	_, err := Start(context.Background(), fakeOptions("", f.url()))
	var r *Refusal
	if !errors.As(err, &r) || r.Chain != "checkout" || r.Segment != "gateway->order" || !strings.Contains(r.Message, "909") {
		t.Fatalf("err %v", err)
	}
	if acks := f.seenAcks(); len(acks) != 1 || acks[0].GetRevision() != 8 || acks[0].GetAccepted() {
		t.Fatalf("acks %v", acks)
	}
}

func TestWithoutAFirstConfigInTimeTheCacheIsUsedThenUpdated(t *testing.T) {
	f := serveFake(t)
	f.silent = true
	cachePath := filepath.Join(t.TempDir(), "budgets.json")
	must(t, WriteCache(cachePath, exampleSnapshot(t, "example-a")))
	a := startAgent(t, fakeOptions(cachePath, f.url()))
	if a.Source() != SourceCache || a.Snapshot().Revision != 7 {
		t.Fatalf("started from %v at revision %d", a.Source(), a.Snapshot().Revision)
	}
	// The goroutine keeps watching, from the cached revision.
	eventually(t, "a watch from revision 7", 5*time.Second, func() bool {
		for _, w := range f.seenWatches() {
			if w.req.GetKnownRevision() == 7 {
				return true
			}
		}
		return false
	})
	f.mu.Lock()
	f.silent = false
	f.mu.Unlock()
	f.publish(update(9, checkout(t, "example-a")))
	eventually(t, "revision 9", 5*time.Second, func() bool { return a.Snapshot().Revision == 9 })
	eventually(t, "the cache at 9", 5*time.Second, func() bool { return cachedRevision(cachePath) == 9 })
}

func TestEndpointsAreTriedInOrderAndABrokenStreamFailsOver(t *testing.T) {
	first, second := serveFake(t), serveFake(t)
	for _, f := range []*fakeControl{first, second} {
		f.publish(update(7, checkout(t, "example-a")))
	}
	// The first endpoint is down at start: the second gives the config.
	a := startAgent(t, fakeOptions("", closedEndpoint(t), second.url(), first.url()))
	if a.Source() != SourceControlPlane || len(second.seenWatches()) != 1 || len(first.seenWatches()) != 0 {
		t.Fatalf("source %v, watches %d/%d", a.Source(), len(second.seenWatches()), len(first.seenWatches()))
	}
	// The second breaks the stream: the agent moves on to the next endpoint, wrapping past
	// the closed one, and resumes there.
	second.dropStreams()
	eventually(t, "a watch on the next endpoint", 10*time.Second, func() bool { return len(first.seenWatches()) == 1 })
	if known := first.seenWatches()[0].req.GetKnownRevision(); known != 7 {
		t.Fatalf("resumed from %d", known)
	}
	first.publish(update(8, checkout(t, "example-a")))
	eventually(t, "revision 8 from the next endpoint", 5*time.Second, func() bool { return a.Snapshot().Revision == 8 })
}

func TestTLSTrustsOnlyTheCAFile(t *testing.T) {
	files := testCA(t)
	creds, err := credentials.NewServerTLSFromFile(files[0], files[1])
	must(t, err)
	f := serveFake(t, grpc.Creds(creds))
	f.publish(update(7, checkout(t, "example-a")))
	opts := fakeOptions("", "https://"+f.addr)
	opts.CAFile = files[2]
	a := startAgent(t, opts)
	if a.Snapshot().Revision != 7 || f.seenWatches()[0].auth != "Bearer s3cret-agent-token" {
		t.Fatalf("revision %d", a.Snapshot().Revision)
	}
	// The name differs from the address: the certificate must carry TLSServerName.
	opts.TLSServerName = "budgetd.test"
	startAgent(t, opts)
	opts.TLSServerName = "elsewhere.test"
	if _, err := Start(context.Background(), opts); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v for a certificate of another name", err)
	}
}

func TestReconnectBackoffDoublesToTheCapWithFullJitter(t *testing.T) {
	b := reconnectBackoff{base: reconnectBase, cap: reconnectCap}
	highest := func(max uint64) uint64 { return max }
	var ceilings []time.Duration
	for i := 0; i < 10; i++ {
		ceilings = append(ceilings, b.next(highest))
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000}
	for i := range want {
		if ceilings[i] != want[i]*time.Millisecond {
			t.Fatalf("ceilings %v", ceilings)
		}
	}
	if d := b.next(func(uint64) uint64 { return 0 }); d != 0 {
		t.Fatalf("lowest pick %v", d)
	}
	for i := 0; i < 100; i++ {
		if d := b.next(randomPick); d < 0 || d > reconnectCap {
			t.Fatalf("delay %v", d)
		}
	}
	if d := b.next(func(max uint64) uint64 { return max + 5 }); d != reconnectCap {
		t.Fatalf("a pick past the ceiling gave %v", d)
	}
	b.reset()
	if b.ceiling() != reconnectBase {
		t.Fatalf("after reset %v", b.ceiling())
	}
}

// manyRoots is a chain of n segments that are each a root, under long names: its refusal
// names the first root once per extra root, a few hundred bytes each.
func manyRoots(revision int64, n int) *pb.BudgetUpdate {
	c := &pb.ChainBudget{Chain: "checkout", Revision: revision, EntryBudgetMs: 800, BreakerWindowMs: 5000}
	for i := 0; i < n; i++ {
		caller := fmt.Sprintf("%s%d", strings.Repeat("σ", 100), i)
		c.Segments = append(c.Segments, &pb.SegmentBudget{
			Id: caller + "->β", Caller: caller, Callee: "β", Class: ClassStable,
			TimeoutMs: 10, BudgetMs: 10, Retry: &pb.RetryPlan{},
		})
	}
	return &pb.BudgetUpdate{Revision: revision, Chains: []*pb.ChainBudget{c}}
}

func TestANackCarriesNoMoreTextThanTheControlPlaneKeeps(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	logs := &syncLog{}
	opts := fakeOptions("", f.url())
	opts.Logger = logs
	a := startAgent(t, opts)
	f.publish(manyRoots(8, 300))
	eventually(t, "the NACK", 5*time.Second, func() bool { return len(f.seenAcks()) == 2 })

	_, refusal := a.LastRefusal()
	if refusal == nil || len(refusal.Error()) < 10*maxNackErrorBytes {
		t.Fatalf("the refusal is not long enough to need cutting: %d bytes", len(refusal.Error()))
	}
	nack := f.seenAcks()[1]
	text := nack.GetError()
	if nack.GetAccepted() || len(text) > maxNackErrorBytes || len(text) <= maxNackErrorBytes-utf8.UTFMax ||
		!utf8.ValidString(text) || !strings.HasPrefix(refusal.Error(), text) {
		t.Fatalf("NACK of %d bytes (valid UTF-8 %v): %.200q", len(text), utf8.ValidString(text), text)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2*maxNackErrorBytes {
			t.Fatalf("a log line of %d bytes: %.200q", len(line), line)
		}
	}
	if a.Snapshot().Revision != 7 {
		t.Fatalf("revision %d after the NACK", a.Snapshot().Revision)
	}
}

func TestANackIsCutAtACharacterBoundary(t *testing.T) {
	for _, message := range []string{strings.Repeat("é", 5000), strings.Repeat("x", 5000), "short"} {
		r := &Refusal{Chain: "checkout", Message: message}
		got := nackText(r)
		whole := r.Error()
		if len(whole) <= maxNackErrorBytes {
			if got != whole {
				t.Fatalf("a short refusal was changed: %q", got)
			}
			continue
		}
		if len(got) > maxNackErrorBytes || len(got) <= maxNackErrorBytes-utf8.UTFMax ||
			!utf8.ValidString(got) || !strings.HasPrefix(whole, got) {
			t.Fatalf("cut to %d bytes (valid UTF-8 %v)", len(got), utf8.ValidString(got))
		}
	}
}

// gRPC's receive limit (4 MiB) bounds what one update can make the agent allocate: a larger
// one breaks the stream, and the config in force stays.
func TestAnUpdateOverTheReceiveLimitLeavesTheConfigInForce(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	logs := &syncLog{}
	opts := fakeOptions("", f.url())
	opts.Logger = logs
	a := startAgent(t, opts)
	huge := update(8, checkout(t, "example-a"))
	huge.Chains[0].BaselineId = strings.Repeat("x", 5<<20)
	f.publish(huge)
	eventually(t, "the stream to break", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), "watch stream failed: ResourceExhausted")
	})
	if a.Snapshot().Revision != 7 {
		t.Fatalf("revision %d", a.Snapshot().Revision)
	}
}

func TestASpreadAskedForIsTheBaseOfTheCeilingsUntilAHealthyStream(t *testing.T) {
	b := reconnectBackoff{base: reconnectBase, cap: reconnectCap}
	highest := func(max uint64) uint64 { return max }
	// Failures before the ask (a stream resumed without an update, a failed attempt) do not
	// double the first ceiling.
	b.next(highest)
	b.next(highest)
	b.spreadOver(1500 * time.Millisecond)
	want := []time.Duration{1500, 3000, 6000, 10000, 10000, 10000, 10000}
	for i, w := range want {
		if d := b.next(highest); d != w*time.Millisecond {
			t.Fatalf("delay %d: %v, want %v ms", i, d, w)
		}
	}
	// Zero, or the same spread again (after each failed attempt), leaves the doubling going.
	b.spreadOver(0)
	b.spreadOver(1500 * time.Millisecond)
	if b.ceiling() != reconnectCap {
		t.Fatalf("after a zero or the same spread %v", b.ceiling())
	}
	// Above the cap the spread is every ceiling; above a minute, a minute.
	b.spreadOver(30 * time.Second)
	for i := 0; i < 2; i++ {
		if d := b.next(highest); d != 30*time.Second {
			t.Fatalf("a 30 s spread gave %v", d)
		}
	}
	b.spreadOver(time.Hour)
	if b.ceiling() != maxSpread {
		t.Fatalf("an hour's spread gave %v", b.ceiling())
	}
	b.reset()
	if b.ceiling() != reconnectBase {
		t.Fatalf("after reset %v", b.ceiling())
	}
}

func TestSpreadValuesAreWholeMilliseconds(t *testing.T) {
	good := map[string]time.Duration{"2500": 2500 * time.Millisecond, "0": 0, "99999999999": maxSpread}
	for in, want := range good {
		if got, ok := parseSpread(in); !ok || got != want {
			t.Fatalf("%q: %v %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "-1", "+5", "1.5", "1e3", "ten", "18446744073709551616"} {
		if _, ok := parseSpread(bad); ok {
			t.Fatalf("%q was taken", bad)
		}
	}
	if d, ok := spreadIn(metadata.Pairs(spreadKey, "750")); !ok || d != 750*time.Millisecond {
		t.Fatalf("from metadata: %v %v", d, ok)
	}
	if _, ok := spreadIn(metadata.MD{}); ok {
		t.Fatal("no metadata gave a spread")
	}
}

// A replica that stops asks its agents to spread their reconnects: agents told a minute come
// back over that minute, not at once as they do when a stream merely breaks.
func TestAgentsSpreadTheirReconnectWhenTheReplicaAsks(t *testing.T) {
	const agents = 20
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	for i := 0; i < agents; i++ {
		opts := fakeOptions("", f.url())
		opts.AgentID = fmt.Sprintf("order-%d", i)
		startAgent(t, opts)
	}
	eventually(t, "every stream", 5*time.Second, func() bool { return f.openStreams() == agents })

	// A broken stream, no spread asked: every agent is back within its 100 ms ceiling.
	f.dropStreams()
	eventually(t, "every agent back", 5*time.Second, func() bool {
		return len(f.seenWatches()) == 2*agents && f.openStreams() == agents
	})

	// Ended with a 60 s spread asked: each waits uniformly up to a minute, so a few at most are
	// back after a second (20 × 1/60 expected; 10 or more has a chance below 1e-12).
	f.endStreamsAsking("60000")
	time.Sleep(time.Second)
	if back := len(f.seenWatches()) - 2*agents; back >= agents/2 {
		t.Fatalf("%d of %d reconnected within 1 s", back, agents)
	}
}

func TestAWatchResumesNamingTheChainsHeldUpToTheServersLimit(t *testing.T) {
	holding := func(n int) *Snapshot {
		s := &Snapshot{Revision: 7, Chains: map[string]*Chain{}}
		for i := 0; i < n; i++ {
			s.Chains[fmt.Sprintf("checkout-%03d", i)] = checkout(t, "example-a")
		}
		return s
	}
	w := &watcher{opts: &Options{AgentID: "order-1", Service: "order"}}
	if req := w.request(nil); req.GetKnownRevision() != 0 || len(req.GetKnownChains()) != 0 {
		t.Fatalf("a first watch resumes from %d holding %v", req.GetKnownRevision(), req.GetKnownChains())
	}
	if req := w.request(holding(2)); req.GetKnownRevision() != 7 || strings.Join(req.GetKnownChains(), ",") != "checkout-000,checkout-001" {
		t.Fatalf("resumes from %d holding %v", req.GetKnownRevision(), req.GetKnownChains())
	}
	if n := len(w.request(holding(256)).GetKnownChains()); n != 256 {
		t.Fatalf("256 chains held, %d named", n)
	}
	// More than the server takes: none named, so every chain counts as held.
	if req := w.request(holding(257)); req.GetKnownRevision() != 7 || len(req.GetKnownChains()) != 0 {
		t.Fatalf("257 held: resumes from %d naming %d", req.GetKnownRevision(), len(req.GetKnownChains()))
	}
}
