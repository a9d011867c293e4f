package budgetagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestOptionsAreCheckedBeforeAnyConnection(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(ca, []byte("garbage"), 0o600))
	valid := func() Options {
		return Options{Endpoints: []string{"http://127.0.0.1:1"}, Token: "t", AgentID: "order-1", Service: "order", Logger: &syncLog{}}
	}
	for _, tc := range []struct {
		want   string
		change func(o *Options)
	}{
		{"no endpoint", func(o *Options) { o.Endpoints = nil }},
		{"scheme must be http or https", func(o *Options) { o.Endpoints = []string{"grpc://127.0.0.1:1"} }},
		{"want scheme://host:port", func(o *Options) { o.Endpoints = []string{"http://127.0.0.1:1/api"} }},
		{"AgentID", func(o *Options) { o.AgentID = "" }},
		{"Service", func(o *Options) { o.Service = "" }},
		{"Token must not be empty", func(o *Options) { o.Token = "" }},
		{"not a valid header value", func(o *Options) { o.Token = "line\nbreak" }},
		{"need https:// endpoints", func(o *Options) { o.CAFile = ca }},
		{"cannot read CAFile", func(o *Options) {
			o.Endpoints = []string{"https://127.0.0.1:1"}
			o.CAFile = ca + ".missing"
		}},
		{"holds no PEM certificate", func(o *Options) {
			o.Endpoints = []string{"https://127.0.0.1:1"}
			o.CAFile = ca
		}},
		{"ReportWindow", func(o *Options) { o.ReportWindow = 7 * time.Second }},
	} {
		o := valid()
		tc.change(&o)
		_, err := Start(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "invalid options") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v", tc.want, err)
		}
	}
}

func TestPrintedOptionsNeverShowTheToken(t *testing.T) {
	o := Options{Token: "s3cr3t-token", AgentID: "order-1"}
	for _, shown := range []string{fmt.Sprint(o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), fmt.Sprint(&o)} {
		if strings.Contains(shown, "s3cr3t") || !strings.Contains(shown, "<redacted>") || !strings.Contains(shown, "order-1") {
			t.Errorf("shown as %s", shown)
		}
	}
}

func TestNeitherControlPlaneNorCacheIsUnavailable(t *testing.T) {
	opts := fakeOptions("", closedEndpoint(t))
	_, err := Start(context.Background(), opts)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no cache path set") || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("err %v", err)
	}
	opts.CachePath = filepath.Join(t.TempDir(), "missing.json")
	_, err = Start(context.Background(), opts)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("err %v", err)
	}
}

// Every cache vector of the conformance corpus through Start itself, with the control plane
// down: start at the vector's revision, or refuse for its reason.
func TestStartFromEveryCachedConfigOfTheCorpus(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "conformance", "cache.json"))
	must(t, err)
	var corpus struct {
		Vectors []struct {
			Name     string   `json:"name"`
			File     string   `json:"file"`
			Expect   string   `json:"expect"`
			Revision int64    `json:"revision"`
			Chains   []string `json:"chains"`
			Reason   string   `json:"reason"`
		} `json:"vectors"`
	}
	must(t, json.Unmarshal(data, &corpus))
	if len(corpus.Vectors) == 0 {
		t.Fatal("no cache vectors")
	}
	down := closedEndpoint(t)
	for _, v := range corpus.Vectors {
		path := filepath.Join(t.TempDir(), "budgets.json")
		must(t, os.WriteFile(path, []byte(v.File), 0o600))
		a, err := Start(context.Background(), fakeOptions(path, down))
		switch v.Expect {
		case "start":
			if err != nil {
				t.Errorf("%s: %v", v.Name, err)
				continue
			}
			if a.Source() != SourceCache || a.Snapshot().Revision != v.Revision || len(a.Snapshot().Chains) != len(v.Chains) {
				t.Errorf("%s: started from %v at revision %d with %d chain(s)", v.Name, a.Source(), a.Snapshot().Revision, len(a.Snapshot().Chains))
			}
			a.Close()
		case "refuse":
			var r *Refusal
			var format *CacheFormatError
			switch {
			case err == nil:
				a.Close()
				t.Errorf("%s: started, want a refusal for %s", v.Name, v.Reason)
			case v.Reason == "format" && !(errors.As(err, &format) && errors.Is(err, ErrUnavailable)):
				t.Errorf("%s: %v, want an unreadable cache", v.Name, err)
			case v.Reason != "format" && !(errors.As(err, &r) && r.Check == v.Reason):
				t.Errorf("%s: %v, want a refusal for %s", v.Name, err, v.Reason)
			}
		default:
			t.Fatalf("%s: unknown expectation %q", v.Name, v.Expect)
		}
	}
}

func TestCloseIsIdempotentAndKeepsTheConfigReadable(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	a := startAgent(t, fakeOptions("", f.url()))
	must(t, a.Close())
	must(t, a.Close())
	if a.Snapshot().Revision != 7 || budgetOf(t, a, inv) != 208 {
		t.Fatalf("after Close: revision %d", a.Snapshot().Revision)
	}
	static := staticAgent(t, exampleSnapshot(t, "example-a"), Options{})
	if err := static.FlushReport(context.Background()); err == nil {
		t.Fatal("a static agent reported")
	}
	must(t, static.Close())
}

// A service that starts and closes agents (a test suite, a reload) must not pile up
// goroutines: Close ends the watch, the reporter and the connections, whether the agent
// follows a stream, reconnects after a broken one, or retries a control plane that is down;
// a Start that fails leaves nothing running either.
func TestCloseLeavesNoGoroutineBehind(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	cachePath := filepath.Join(t.TempDir(), "budgets.json")
	opts := fakeOptions(cachePath, f.url())
	opts.ReportWindow = 100 * time.Millisecond

	following := func() {
		watches := len(f.seenWatches())
		a := startAgent(t, opts)
		must(t, a.Call(context.Background(), inv, "key", func(context.Context, Attempt) error { return nil }))
		f.publish(update(a.Snapshot().Revision+1, checkout(t, "example-b-inverted"))) // NACKed
		f.dropStreams()                                                               // and reconnected
		eventually(t, "the stream reopened", 5*time.Second, func() bool {
			return len(f.seenWatches()) == watches+2 && f.openStreams() == 1
		})
		must(t, a.Close())
		must(t, a.Close())
	}
	fromCache := func() {
		a := startAgent(t, fakeOptions(cachePath, closedEndpoint(t)))
		if a.Source() != SourceCache {
			t.Fatalf("started from %v", a.Source())
		}
		time.Sleep(300 * time.Millisecond) // a few reconnect attempts
		must(t, a.Close())
	}
	inverted := serveFake(t)
	inverted.publish(update(8, checkout(t, "example-b-inverted")))
	refused := func() {
		if _, err := Start(context.Background(), fakeOptions("", inverted.url())); err == nil {
			t.Fatal("started with an inverted config")
		}
	}
	unavailable := func() {
		if _, err := Start(context.Background(), fakeOptions("", closedEndpoint(t))); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("start without a control plane or a cache: %v", err)
		}
	}
	// A first round starts whatever grpc-go starts once per process.
	following()
	settled := func(baseline int) bool {
		return runtime.NumGoroutine() <= baseline
	}
	for _, round := range []struct {
		name string
		run  func()
	}{
		{"following the stream", following},
		{"retrying from the cache", fromCache},
		{"refusing the first config", refused},
		{"finding no config", unavailable},
	} {
		baseline := runtime.NumGoroutine()
		round.run()
		end := time.Now().Add(5 * time.Second)
		for !settled(baseline) && time.Now().Before(end) {
			time.Sleep(20 * time.Millisecond)
		}
		if !settled(baseline) {
			stacks := make([]byte, 1<<20)
			t.Fatalf("%s: %d goroutines after it, %d before:\n%s",
				round.name, runtime.NumGoroutine(), baseline, stacks[:runtime.Stack(stacks, true)])
		}
	}
	if f.openStreams() != 0 {
		t.Fatalf("%d streams still open", f.openStreams())
	}
}

// FlushReport after Close used to send on the connection Close had released, and panicked.
func TestFlushReportAfterCloseFails(t *testing.T) {
	f := serveFake(t)
	f.publish(update(7, checkout(t, "example-a")))
	a := startAgent(t, fakeOptions("", f.url()))
	must(t, a.Close())
	must(t, a.Call(context.Background(), inv, "key", func(context.Context, Attempt) error { return nil }))
	err := a.FlushReport(context.Background())
	var failed *ReportError
	if !errors.As(err, &failed) || failed.Refused || !errors.Is(err, errClosed) {
		t.Fatalf("FlushReport after Close: %v", err)
	}
	if stats := a.ReportStats(); stats.PendingWindows != 1 {
		t.Fatalf("%d windows pending, want the call's", stats.PendingWindows)
	}
}
