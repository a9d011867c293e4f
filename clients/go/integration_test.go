package budgetagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The Go agent against a real budgetd process (SPEC §10): budgets follow approvals, an
// inverted publication is NACKed with its numbers, the cache carries a start through an
// outage, TLS with a CA file, and the interceptor applies the live budgets.

// people are the tokens of one test's budgetd: uma uploads, abe approves (four eyes), and
// the agent's own.
type people struct {
	uploader, approver, agent string
}

func newPeople(b *budgetd) people {
	return people{uploader: b.token("uploader", "uma"), approver: b.token("approver", "abe"), agent: b.token("agent", "order-agents")}
}

// publishA applies the checkout topology, uploads run A and approves its draft: SPEC
// example A goes live. It returns the revision published and the baseline's id.
func publishA(t *testing.T, b *budgetd, p people) (int64, string) {
	t.Helper()
	b.ok("PUT", "/chains/checkout/topology", p.uploader, example(t, "checkout-topology.json"))
	run := b.ok("POST", "/chains/checkout/runs", p.uploader, example(t, "checkout-run-a.json"))
	baseline := str(t, run, "baseline_id")
	return approve(t, b, p, baseline), baseline
}

func approve(t *testing.T, b *budgetd, p people, baseline string) int64 {
	t.Helper()
	return num(t, b.ok("POST", "/baselines/"+baseline+"/approve", p.approver, map[string]string{"comment": "go agent test"}), "revision")
}

func agentOptions(t *testing.T, b *budgetd, p people, id, cacheDir string) Options {
	logs := &syncLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s log:\n%s", id, logs)
		}
	})
	return Options{
		Endpoints:          []string{b.grpcURL()},
		Token:              p.agent,
		AgentID:            id,
		Service:            "order",
		Labels:             map[string]string{"host": "test"},
		CachePath:          filepath.Join(cacheDir, id+".json"),
		ConnectTimeout:     time.Second,
		FirstConfigTimeout: 3 * time.Second,
		ReportWindow:       time.Second,
		Logger:             logs,
	}
}

func startAgent(t *testing.T, opts Options) *Agent {
	t.Helper()
	a, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// fleet is the agent's entry in GET /agents.
func fleet(t *testing.T, b *budgetd, agentID string) map[string]interface{} {
	t.Helper()
	list, _ := b.ok("GET", "/agents?limit=1000", b.admin, nil)["agents"].([]interface{})
	for _, item := range list {
		if entry, ok := item.(map[string]interface{}); ok && entry["agent_id"] == agentID {
			return entry
		}
	}
	return map[string]interface{}{}
}

func budgetOf(t *testing.T, a *Agent, segment string) uint64 {
	t.Helper()
	_, seg, ok := a.Snapshot().Segment(segment)
	if !ok {
		t.Fatalf("no segment %s at revision %d", segment, a.Snapshot().Revision)
	}
	return seg.BudgetMs
}

func cachedRevision(path string) int64 {
	s, err := ReadCache(path)
	if err != nil {
		return -1
	}
	return s.Revision
}

func TestAgainstBudgetdTheAgentFollowsApprovalsAndNacksAnInvertedPublication(t *testing.T) {
	b := startBudgetd(t)
	p := newPeople(b)
	revA, baselineA := publishA(t, b, p)

	opts := agentOptions(t, b, p, "order-go-1", t.TempDir())
	a := startAgent(t, opts)
	if a.Source() != SourceControlPlane || a.Snapshot().Revision != revA {
		t.Fatalf("started from %v at revision %d, want the control plane at %d", a.Source(), a.Snapshot().Revision, revA)
	}
	if budgetOf(t, a, inv) != 208 || budgetOf(t, a, pay) != 390 || budgetOf(t, a, user) != 9 {
		t.Fatalf("budgets %d/%d/%d, want SPEC example A's 208/390/9", budgetOf(t, a, inv), budgetOf(t, a, pay), budgetOf(t, a, user))
	}
	if got := cachedRevision(opts.CachePath); got != revA {
		t.Fatalf("cached revision %d, want %d", got, revA)
	}
	eventually(t, "the ACK in fleet status", 10*time.Second, func() bool { return num(t, fleet(t, b, "order-go-1"), "acked") == revA })
	entry := fleet(t, b, "order-go-1")
	if entry["client"] != "go/"+Version || entry["service"] != "order" {
		t.Errorf("fleet status shows client %v, service %v", entry["client"], entry["service"])
	}

	// Example C drifts; approving it publishes payment at 507 ms, and the agent follows.
	runC := b.ok("POST", "/chains/checkout/runs", p.uploader, example(t, "checkout-run-c-drift.json"))
	revC := approve(t, b, p, str(t, runC, "baseline_id"))
	eventually(t, "the agent at example C", 10*time.Second, func() bool { return a.Snapshot().Revision == revC })
	if _, seg, _ := a.Snapshot().Segment(pay); seg.TimeoutMs != 507 {
		t.Errorf("payment timeout %d, want 507", seg.TimeoutMs)
	}
	eventually(t, "the cache at example C", 10*time.Second, func() bool { return cachedRevision(opts.CachePath) == revC })
	eventually(t, "the ACK of example C", 10*time.Second, func() bool { return num(t, fleet(t, b, "order-go-1"), "acked") == revC })

	// Example B's draft (inventory pinned 500, payment 400) has an inversion: the server
	// itself will not approve it.
	b.ok("PUT", "/chains/checkout/topology", p.uploader, example(t, "checkout-topology-b-inverted.json"))
	runB := b.ok("POST", "/chains/checkout/runs", p.uploader, example(t, "checkout-run-a.json"))
	draftB, _ := runB["baseline_id"].(string)
	if draftB == "" {
		draftB = str(t, b.ok("POST", "/chains/checkout/baselines", p.uploader, map[string]string{"run_id": str(t, runB, "run_id")}), "id")
	}
	if code, answer := b.call("POST", "/baselines/"+draftB+"/approve", p.approver, map[string]string{"comment": "inverted"}); code/100 == 2 {
		t.Fatalf("budgetd approved the inverted draft: %v", answer)
	}

	// So forge one past the server's checks, as a corrupted or hand-edited store would hold:
	// example A's approved baseline given example B's budgets, then rolled back to.
	b.forge(baselineA, draftB)
	published := b.ok("POST", "/chains/checkout/rollback", p.approver, map[string]string{"baseline_id": baselineA})
	revBad := num(t, published, "revision")
	eventually(t, "the NACK in fleet status", 20*time.Second, func() bool {
		n, _ := fleet(t, b, "order-go-1")["nack_revision"].(float64)
		return int64(n) == revBad
	})
	reason, _ := fleet(t, b, "order-go-1")["nack_error"].(string)
	if !strings.Contains(reason, "inversion") || !strings.Contains(reason, "909") || !strings.Contains(reason, "109") {
		t.Errorf("NACK reason %q lacks the numbers", reason)
	}
	if a.Snapshot().Revision != revC || budgetOf(t, a, inv) != 208 {
		t.Errorf("the agent moved to revision %d (inventory %d ms), want example C kept", a.Snapshot().Revision, budgetOf(t, a, inv))
	}
	if rev, r := a.LastRefusal(); rev != revBad || r == nil || r.Segment != "gateway->order" {
		t.Errorf("last refusal %d %v", rev, r)
	}
	if got := cachedRevision(opts.CachePath); got != revC {
		t.Errorf("cached revision %d, want example C's %d", got, revC)
	}
}

func TestAgainstBudgetdTheCacheCarriesAStartThroughAnOutage(t *testing.T) {
	b := startBudgetd(t)
	p := newPeople(b)
	revA, _ := publishA(t, b, p)
	cache := t.TempDir()
	first := startAgent(t, agentOptions(t, b, p, "order-go-1", cache))
	if first.Snapshot().Revision != revA {
		t.Fatalf("revision %d, want %d", first.Snapshot().Revision, revA)
	}
	must(t, first.Close())
	b.stop()

	// Down: an agent with the same cache starts from it, at once.
	opts := agentOptions(t, b, p, "order-go-1", cache)
	began := time.Now()
	second := startAgent(t, opts)
	if second.Source() != SourceCache || second.Snapshot().Revision != revA || budgetOf(t, second, inv) != 208 {
		t.Fatalf("started from %v at revision %d", second.Source(), second.Snapshot().Revision)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the start took %v with the server down", took)
	}

	// Back: the agent reconnects by itself and follows the next approval.
	b.start()
	runC := b.ok("POST", "/chains/checkout/runs", p.uploader, example(t, "checkout-run-c-drift.json"))
	revC := approve(t, b, p, str(t, runC, "baseline_id"))
	eventually(t, "the reconnected agent at example C", 30*time.Second, func() bool { return second.Snapshot().Revision == revC })
	eventually(t, "the cache at example C", 10*time.Second, func() bool { return cachedRevision(opts.CachePath) == revC })
}

func TestAgainstBudgetdAChainTheCacheLacksIsSentOnReconnect(t *testing.T) {
	b := startBudgetd(t)
	p := newPeople(b)
	// checkout-eu is published before checkout: older than the revision the cache is at.
	b.ok("PUT", "/chains/checkout-eu/topology", p.uploader, example(t, "checkout-topology.json"))
	runEU := b.ok("POST", "/chains/checkout-eu/runs", p.uploader, example(t, "checkout-run-a.json"))
	revEU := approve(t, b, p, str(t, runEU, "baseline_id"))
	revA, _ := publishA(t, b, p)
	cache := t.TempDir()
	opts := agentOptions(t, b, p, "order-go-3", cache)
	opts.Chains = []string{"checkout"}
	first := startAgent(t, opts)
	if first.Snapshot().Revision != revA || revEU >= revA {
		t.Fatalf("revision %d, want %d (checkout-eu at %d)", first.Snapshot().Revision, revA, revEU)
	}
	must(t, first.Close())
	b.stop()

	// Down: the agent, now also watching checkout-eu, starts from a cache without it.
	opts.Chains = []string{"checkout", "checkout-eu"}
	second := startAgent(t, opts)
	if second.Source() != SourceCache || second.Snapshot().Chains["checkout-eu"] != nil {
		t.Fatalf("started from %v holding %d chains", second.Source(), len(second.Snapshot().Chains))
	}
	// Back: the reconnect brings the chain the cache lacks.
	b.start()
	eventually(t, "checkout-eu after the reconnect", 30*time.Second, func() bool {
		return second.Snapshot().Chains["checkout-eu"] != nil
	})
	if got := second.Snapshot(); got.Revision != revA || len(got.Chains) != 2 {
		t.Fatalf("revision %d with %d chains, want %d with 2", got.Revision, len(got.Chains), revA)
	}
}

func TestAgainstBudgetdOverTLSOnlyTheConfiguredCAIsTrusted(t *testing.T) {
	files := testCA(t)
	b := startBudgetd(t, files...)
	p := newPeople(b)
	revA, _ := publishA(t, b, p)

	opts := agentOptions(t, b, p, "order-go-tls", t.TempDir())
	opts.CAFile = files[2]
	a := startAgent(t, opts)
	if a.Source() != SourceControlPlane || a.Snapshot().Revision != revA {
		t.Fatalf("started from %v at revision %d", a.Source(), a.Snapshot().Revision)
	}

	// Without the CA, the server's certificate is not trusted: no config, no cache, no start.
	opts = agentOptions(t, b, p, "order-go-untrusting", t.TempDir())
	_, err := Start(context.Background(), opts)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err %v, want unavailable for an untrusted certificate", err)
	}
}

func TestAgainstBudgetdTheInterceptorAppliesTheLiveBudgets(t *testing.T) {
	b := startBudgetd(t)
	p := newPeople(b)
	publishA(t, b, p)
	a := startAgent(t, agentOptions(t, b, p, "order-go-1", t.TempDir()))
	d := startDownstream(t)
	inventory := d.dial(t, a, map[string]string{checkMethod: inv}, KeyFromMetadata("idempotency-key"))
	users := d.dial(t, a, map[string]string{checkMethod: user}, KeyFromMetadata("idempotency-key"))

	// The handler receives inventory's 44 ms attempt timeout; a stalled first attempt is
	// retried once, within the 208 ms budget.
	d.next(0)
	must(t, check(inventory, 0))
	expectAttempts(t, d, 1, 44*time.Millisecond)
	d.next(1)
	began := time.Now()
	must(t, check(inventory, 0))
	expectAttempts(t, d, 2, 44*time.Millisecond)
	if took := time.Since(began); took > 208*time.Millisecond+slack {
		t.Errorf("the retried call took %v, past the 208 ms budget", took)
	}
	d.next(2)
	if err := check(inventory, 0); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("two stalls: err %v, want DEADLINE_EXCEEDED after the one retry", err)
	}
	expectAttempts(t, d, 2, 44*time.Millisecond)

	// user is not idempotent: 9 ms, one attempt, key or not.
	d.next(1)
	if err := check(users, 0); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v", err)
	}
	expectAttempts(t, d, 1, 9*time.Millisecond)

	// What the calls did reaches the control plane.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, a.FlushReport(ctx))
	if s := a.ReportStats(); s.SentWindows == 0 || s.FailedReports != 0 {
		t.Errorf("report stats %+v", s)
	}
}

// forge stops budgetd, exports its store, gives baseline target the budgets of baseline
// source (findings cleared), imports the result into a fresh data directory and restarts
// budgetd on it, on the same ports.
func (b *budgetd) forge(target, source string) {
	b.t.Helper()
	b.stop()
	dir := b.t.TempDir()
	exported := filepath.Join(dir, "export.json")
	b.offline("export", "--data-dir", b.dataDir, "--output", exported)
	data, err := os.ReadFile(exported)
	must(b.t, err)
	var store map[string]interface{}
	must(b.t, decodeNumbers(data, &store))
	// Documents have a table of their own on SQLite (budgetd's migration 0013).
	table := store["tables"].(map[string]interface{})["baseline_documents"].(map[string]interface{})
	columns := table["columns"].([]interface{})
	at := func(name string) int {
		for i, c := range columns {
			if c == name {
				return i
			}
		}
		b.t.Fatalf("the export's baseline_documents have no column %q", name)
		return -1
	}
	id, document := at("baseline_id"), at("document")
	docs := map[string]map[string]interface{}{}
	rows := table["rows"].([]interface{})
	for _, row := range rows {
		r := row.([]interface{})
		var doc map[string]interface{}
		must(b.t, decodeNumbers([]byte(r[document].(string)), &doc))
		docs[r[id].(string)] = doc
	}
	if docs[target] == nil || docs[source] == nil {
		b.t.Fatalf("the export lacks baseline %s or %s", target, source)
	}
	docs[target]["segments"] = docs[source]["segments"]
	docs[target]["findings"] = []interface{}{}
	// The target's row: its document is written current (state fields as the row has them,
	// nothing left to render) and its SHA-256 is the forged bytes', as an import checks.
	baselines := store["tables"].(map[string]interface{})["baselines"].(map[string]interface{})
	col := map[string]int{}
	for i, c := range baselines["columns"].([]interface{}) {
		col[c.(string)] = i
	}
	var row []interface{}
	for _, r := range baselines["rows"].([]interface{}) {
		if r.([]interface{})[col["id"]] == target {
			row = r.([]interface{})
		}
	}
	docs[target]["state"] = row[col["state"]]
	delete(docs[target], "superseded_by")
	if by, ok := row[col["superseded_by"]].(string); ok {
		docs[target]["superseded_by"] = by
	}
	text, err := json.Marshal(docs[target])
	must(b.t, err)
	digest := sha256.Sum256(text)
	row[col["sha256"]] = hex.EncodeToString(digest[:])
	row[col["document_behind"]] = 0
	for _, r := range rows {
		if r.([]interface{})[id] == target {
			r.([]interface{})[document] = string(text)
		}
	}
	forged, err := json.Marshal(store)
	must(b.t, err)
	must(b.t, os.WriteFile(exported, forged, 0o600))
	b.dataDir = filepath.Join(dir, "data")
	must(b.t, os.MkdirAll(b.dataDir, 0o755))
	b.offline("import", "--data-dir", b.dataDir, "--input", exported)
	b.start()
}

// decodeNumbers decodes JSON keeping numbers as written, so a round trip changes none.
func decodeNumbers(data []byte, v interface{}) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
