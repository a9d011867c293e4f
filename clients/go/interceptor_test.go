package budgetagent

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// checkMethod is the method the tests' downstream serves (gRPC's standard health check,
// standing in for inventory's Reserve).
const checkMethod = "/grpc.health.v1.Health/Check"

// received is one request as the downstream's handler saw it: the time left until the
// deadline it received (none: has is false) and the idempotency key header.
type received struct {
	left time.Duration
	has  bool
	key  string
}

// downstream is a real gRPC server whose handler records what it received and stalls the
// next `stall` requests until their deadline.
type downstream struct {
	healthpb.UnimplementedHealthServer
	addr string

	mu    sync.Mutex
	got   []received
	stall int
}

func startDownstream(t *testing.T) *downstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &downstream{addr: l.Addr().String()}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, d)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return d
}

func (d *downstream) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	r := received{}
	if deadline, has := ctx.Deadline(); has {
		r.left, r.has = time.Until(deadline), true
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("idempotency-key")) > 0 {
		r.key = md.Get("idempotency-key")[0]
	}
	d.mu.Lock()
	d.got = append(d.got, r)
	stall := d.stall > 0
	if stall {
		d.stall--
	}
	d.mu.Unlock()
	if stall {
		<-ctx.Done()
		return nil, status.Error(codes.DeadlineExceeded, "stalled")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// next forgets what was received and stalls the next n requests.
func (d *downstream) next(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got, d.stall = nil, n
}

func (d *downstream) received() []received {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]received{}, d.got...)
}

// dial connects to the downstream through a's interceptor with the given segment map.
func (d *downstream) dial(t *testing.T, a *Agent, segments map[string]string, opts ...InterceptorOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.Dial(d.addr, grpc.WithInsecure(), grpc.WithUnaryInterceptor(a.UnaryClientInterceptor(segments, opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// check makes one call within an inherited timeout (0: none) and returns its error.
func check(client healthpb.HealthClient, inherited time.Duration, opts ...grpc.CallOption) error {
	ctx := context.Background()
	if inherited > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, inherited)
		defer cancel()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "order-42"}, opts...)
	return err
}

// expectAttempts checks how many requests the downstream received and that each carried a
// deadline of at most timeout (and not much less).
func expectAttempts(t *testing.T, d *downstream, n int, timeout time.Duration) {
	t.Helper()
	got := d.received()
	if len(got) != n {
		t.Fatalf("downstream received %d request(s), want %d: %+v", len(got), n, got)
	}
	for i, r := range got {
		if !r.has || r.left > timeout || r.left < timeout-slack {
			t.Errorf("request %d: deadline in %v (has %v), want about %v", i+1, r.left, r.has, timeout)
		}
	}
}

func TestTheInterceptorAppliesTheSegmentsTimeoutAndRetryPlan(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	d := startDownstream(t)
	inventory := d.dial(t, a, map[string]string{checkMethod: inv}, KeyFromMetadata("idempotency-key"))
	users := d.dial(t, a, map[string]string{checkMethod: user}, KeyFromMetadata("idempotency-key"))

	// Each attempt carries the segment's timeout, within the caller's deadline.
	d.next(0)
	must(t, check(inventory, 0))
	expectAttempts(t, d, 1, 44*time.Millisecond)
	d.next(0)
	must(t, check(inventory, 20*time.Millisecond))
	expectAttempts(t, d, 1, 20*time.Millisecond)

	// A deadline failure on an idempotent segment is retried once, with the same key.
	d.next(1)
	must(t, check(inventory, 0))
	expectAttempts(t, d, 2, 44*time.Millisecond)
	if got := d.received(); got[0].key != key || got[1].key != key {
		t.Errorf("keys %q, %q", got[0].key, got[1].key)
	}

	// Never on a non-idempotent segment, key or not.
	d.next(1)
	if err := check(users, 0); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v", err)
	}
	expectAttempts(t, d, 1, 9*time.Millisecond)

	w := windows(a)
	if i := w[inv]; i.Calls != 3 || i.Attempts != 4 || i.Retries["deadline"] != 1 || i.Outcomes["ok"] != 3 {
		t.Errorf("inventory counted %v", i)
	}
	if u := w[user]; u.Calls != 1 || u.Outcomes["deadline_exceeded"] != 1 {
		t.Errorf("user counted %v", u)
	}
}

func TestTheIdempotencyKeyComesFromTheCallTheRequestOrTheMetadata(t *testing.T) {
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	d := startDownstream(t)
	segments := map[string]string{checkMethod: inv}
	noKey := d.dial(t, a, segments)
	fromRequest := d.dial(t, a, segments, KeyFromRequest(func(method string, req interface{}) string {
		return req.(*healthpb.HealthCheckRequest).GetService()
	}))
	fromOtherHeader := d.dial(t, a, segments, KeyFromMetadata("x-request-id"))

	for _, tc := range []struct {
		what     string
		client   healthpb.HealthClient
		opts     []grpc.CallOption
		attempts int
	}{
		{"no key source", noKey, nil, 1},
		{"an empty call option", noKey, []grpc.CallOption{IdempotencyKey("")}, 1},
		{"the call option", noKey, []grpc.CallOption{IdempotencyKey("order-42")}, 2},
		{"the request", fromRequest, nil, 2},
		{"a header the call does not carry", fromOtherHeader, nil, 1},
	} {
		d.next(1)
		check(tc.client, 0, tc.opts...)
		if got := len(d.received()); got != tc.attempts {
			t.Errorf("%s: %d attempt(s), want %d", tc.what, got, tc.attempts)
		}
	}
}

func TestOtherMethodsAndUnknownSegmentsPassThrough(t *testing.T) {
	logs := &syncLog{}
	a := staticAgent(t, exampleSnapshot(t, "example-a"), Options{Logger: logs})
	d := startDownstream(t)
	unmapped := d.dial(t, a, map[string]string{"/inventory.v1.Inventory/Reserve": inv})
	unknown := d.dial(t, a, map[string]string{checkMethod: "order->nowhere"})

	for _, client := range []healthpb.HealthClient{unmapped, unknown} {
		d.next(0)
		must(t, check(client, 0))
		must(t, check(client, time.Second))
		got := d.received()
		if len(got) != 2 || got[0].has || !got[1].has || got[1].left < 900*time.Millisecond {
			t.Errorf("received %+v: want no deadline, then the caller's own", got)
		}
	}
	if w := windows(a); len(w) != 0 {
		t.Errorf("counted %v", w)
	}
}
