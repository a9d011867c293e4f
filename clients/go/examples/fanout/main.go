// Command fanout measures how fast a running budgetd delivers a publication to N Watch streams
// held by Go clients: the Go equivalent of `budgetctl bench watch`, against a local server only.
//
// It creates the tokens it needs (uploader, approver, one agent token per 1000 streams) with
// the admin token, applies the handbook's checkout topology to a fresh chain and publishes run
// A, opens N Watch streams on that chain over a few connections, and waits until every stream
// holds the first revision. Then, each round, it uploads a run that drifts (payment p999
// alternating 390 and 300 ms), approves the draft, and measures the time from just before the
// approve request is sent until every stream has received the new revision. It prints p50 /
// p99 / max over the rounds and the server's resident memory (from /metrics) before the
// streams opened and once they are idle.
//
//	go run ./examples/fanout --url http://127.0.0.1:8080 --grpc http://127.0.0.1:50051 \
//	    --token "$BUDGETD_ADMIN_TOKEN" --subscribers 1000 --rounds 30
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
)

const (
	maxSubscribers = 20_000
	// streamsPerToken stays below budgetd's default limit of Watch streams per token (1024).
	streamsPerToken = 1000
	openTimeout     = 2 * time.Minute
	roundTimeout    = time.Minute
)

type config struct {
	url, grpc, token, caCert, examples string
	subscribers, connections, rounds   int
	json                               bool
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080", "budgetd's HTTP root (loopback only)")
	flag.StringVar(&c.grpc, "grpc", "http://127.0.0.1:50051", "budgetd's gRPC address: http://, https:// or host:port (loopback only)")
	flag.StringVar(&c.token, "token", os.Getenv("BUDGETD_TOKEN"), "an admin token (default $BUDGETD_TOKEN)")
	flag.StringVar(&c.caCert, "ca-cert", "", "PEM file of the CA to trust for https (default: the system's roots)")
	flag.StringVar(&c.examples, "examples", "", "directory with checkout-topology.json and checkout-run-a.json (default: the first schemas/examples in the working directory or above)")
	flag.IntVar(&c.subscribers, "subscribers", 1000, fmt.Sprintf("Watch streams to hold open (at most %d)", maxSubscribers))
	flag.IntVar(&c.connections, "connections", 0, "HTTP/2 connections to spread them over (default: one per 250 streams)")
	flag.IntVar(&c.rounds, "rounds", 20, "publications to time (1-1000)")
	flag.BoolVar(&c.json, "json", false, "print the result as JSON")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.subscribers < 1 || c.subscribers > maxSubscribers {
		return fmt.Errorf("--subscribers %d: between 1 and %d", c.subscribers, maxSubscribers)
	}
	if c.rounds < 1 || c.rounds > 1000 {
		return fmt.Errorf("--rounds %d: between 1 and 1000", c.rounds)
	}
	if c.connections == 0 {
		c.connections = (c.subscribers + 249) / 250
	}
	if c.connections < 1 || c.connections > c.subscribers {
		return fmt.Errorf("--connections %d: between 1 and --subscribers", c.connections)
	}
	if c.token == "" {
		return fmt.Errorf("an admin token is needed: --token or $BUDGETD_TOKEN")
	}
	admin, err := newAPI(c.url, c.token, c.caCert)
	if err != nil {
		return err
	}
	target, useTLS, err := grpcTarget(c.grpc)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if useTLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.caCert != "" {
			if tlsConfig.RootCAs, err = loadCAs(c.caCert); err != nil {
				return err
			}
		}
	}
	topology, runA, err := examples(c.examples)
	if err != nil {
		return err
	}

	b, err := setUp(admin, c.subscribers, topology, runA)
	if err != nil {
		return err
	}
	defer b.tearDown()
	first, err := b.publish(300)
	if err != nil {
		return err
	}
	a := newArrivals(c.subscribers)
	a.arm(first.revision)

	rssBefore, haveBefore := admin.rss()
	fmt.Fprintf(os.Stderr, "opening %d Watch streams over %d connection(s) to %s …\n", c.subscribers, c.connections, target)
	var conns []*grpc.ClientConn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for i := 0; i < c.connections; i++ {
		conn, err := dial(target, tlsConfig)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opened := time.Now()
	streams := watchAll(ctx, c.subscribers, conns, b.agentTokens, b.chain, b.tag, a)
	defer func() {
		cancel()
		streams.Wait()
	}()
	if _, _, err := a.wait(openTimeout); err != nil {
		return err
	}
	openAll := time.Since(opened)
	time.Sleep(1500 * time.Millisecond)
	rssAfter, haveAfter := admin.rss()
	fmt.Fprintf(os.Stderr, "all %d streams hold the first snapshot after %v; timing %d publications …\n",
		c.subscribers, openAll.Round(time.Millisecond), c.rounds)

	var fromRequest, fromResponse, firstStream, approve []time.Duration
	for round := 0; round < c.rounds; round++ {
		// Payment p999 alternates between 390 and 300 ms: ±30 %, a drift every time.
		p999 := 390
		if round%2 == 1 {
			p999 = 300
		}
		// On a quiet server the next revision is the last one + 1; arm before publishing.
		want := a.target.Load() + 1
		a.arm(want)
		p, err := b.publish(p999)
		if err != nil {
			return err
		}
		if p.revision != want {
			return fmt.Errorf("another publication interleaved (got revision %d, not %d); run the benchmark on a quiet server", p.revision, want)
		}
		first, last, err := a.wait(roundTimeout)
		if err != nil {
			return err
		}
		firstStream = append(firstStream, first.Sub(p.sent))
		fromRequest = append(fromRequest, last.Sub(p.sent))
		fromResponse = append(fromResponse, nonNegative(last.Sub(p.answered)))
		approve = append(approve, p.answered.Sub(p.sent))
	}

	res := result{
		Subscribers: c.subscribers, Connections: c.connections, Rounds: c.rounds, Chain: b.chain,
		OpenAllMs:    ms(openAll),
		ApproveMs:    summarize(approve),
		FirstStream:  summarize(firstStream),
		FromRequest:  summarize(fromRequest),
		FromResponse: summarize(fromResponse),
	}
	if haveBefore && haveAfter {
		res.RSSBefore, res.RSSAfter = &rssBefore, &rssAfter
		perStream := float64(int64(rssAfter)-int64(rssBefore)) / float64(c.subscribers)
		res.RSSPerStream = &perStream
	}
	return res.print(c.json)
}

// bench is what setUp made on the server.
type bench struct {
	admin, uploader, approver *api
	tag, chain                string
	runA                      []byte
	tokenNames                []string
	agentTokens               []string
}

// setUp creates the tokens and applies the topology of a fresh chain.
func setUp(admin *api, subscribers int, topology, runA []byte) (*bench, error) {
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, err
	}
	b := &bench{admin: admin, tag: hex.EncodeToString(random[:]), runA: runA}
	b.chain = "bench-go-" + b.tag
	token := func(role, name string) (*api, error) {
		secret, err := admin.createToken(role, name)
		if err != nil {
			return nil, err
		}
		b.tokenNames = append(b.tokenNames, name)
		return admin.as(secret), nil
	}
	var err error
	if b.uploader, err = token("uploader", "bench-go-uploader-"+b.tag); err != nil {
		return nil, err
	}
	if b.approver, err = token("approver", "bench-go-approver-"+b.tag); err != nil {
		b.tearDown()
		return nil, err
	}
	for k := 0; k*streamsPerToken < subscribers; k++ {
		agent, err := token("agent", fmt.Sprintf("bench-go-agent-%s-%d", b.tag, k))
		if err != nil {
			b.tearDown()
			return nil, err
		}
		b.agentTokens = append(b.agentTokens, agent.token)
	}
	if err := b.uploader.call("PUT", []string{"chains", b.chain, "topology"}, topology, nil); err != nil {
		b.tearDown()
		return nil, err
	}
	return b, nil
}

// tearDown revokes the tokens setUp created; the chain stays, as budgetctl bench leaves it.
func (b *bench) tearDown() {
	for _, name := range b.tokenNames {
		if err := b.admin.revokeToken(name); err != nil {
			fmt.Fprintf(os.Stderr, "fanout: could not revoke token %s: %v\n", name, err)
		}
	}
	b.tokenNames = nil
}

// publication is one approved run: its revision, and when the approve request was sent and
// answered.
type publication struct {
	revision       int64
	sent, answered time.Time
}

// publish uploads run A with payment's p999 set to p999 ms and approves the draft it opens.
func (b *bench) publish(p999 int) (publication, error) {
	run, err := withPaymentP999(b.runA, p999)
	if err != nil {
		return publication{}, err
	}
	id, err := b.uploader.uploadRun(b.chain, run)
	if err != nil {
		return publication{}, err
	}
	sent := time.Now()
	revision, err := b.approver.approve(id)
	if err != nil {
		return publication{}, err
	}
	return publication{revision: revision, sent: sent, answered: time.Now()}, nil
}

type summary struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type result struct {
	Subscribers  int      `json:"subscribers"`
	Connections  int      `json:"connections"`
	Rounds       int      `json:"rounds"`
	Chain        string   `json:"chain"`
	OpenAllMs    float64  `json:"open_all_ms"`
	ApproveMs    summary  `json:"approve_ms"`
	FirstStream  summary  `json:"time_to_first_from_approve_request_ms"`
	FromRequest  summary  `json:"time_to_all_from_approve_request_ms"`
	FromResponse summary  `json:"time_to_all_from_approve_response_ms"`
	RSSBefore    *uint64  `json:"server_rss_before_bytes"`
	RSSAfter     *uint64  `json:"server_rss_after_bytes"`
	RSSPerStream *float64 `json:"server_rss_per_stream_bytes"`
}

func (r result) print(asJSON bool) error {
	if asJSON {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		fmt.Println(string(out))
		return nil
	}
	fmt.Printf("streams: %d over %d connection(s); rounds: %d\n", r.Subscribers, r.Connections, r.Rounds)
	fmt.Printf("approve call (request sent to response, durable commit included): p50 %.1f ms, p99 %.1f ms\n", r.ApproveMs.P50, r.ApproveMs.P99)
	fmt.Printf("time from approve request sent to the first stream: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", r.FirstStream.P50, r.FirstStream.P99, r.FirstStream.Max)
	fmt.Printf("time from approve request sent to all streams: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", r.FromRequest.P50, r.FromRequest.P99, r.FromRequest.Max)
	fmt.Printf("time from approve response to all streams: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", r.FromResponse.P50, r.FromResponse.P99, r.FromResponse.Max)
	if r.RSSPerStream == nil {
		fmt.Println("server memory: unknown (no process_resident_memory_bytes in /metrics)")
		return nil
	}
	fmt.Printf("server RSS: %.1f MiB before the streams, %.1f MiB with them idle; %.1f KiB per idle stream\n",
		float64(*r.RSSBefore)/(1<<20), float64(*r.RSSAfter)/(1<<20), *r.RSSPerStream/1024)
	return nil
}

// summarize is the nearest-rank p50 and p99 and the max of ds, in milliseconds.
func summarize(ds []time.Duration) summary {
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return summary{P50: ms(percentile(sorted, 50)), P99: ms(percentile(sorted, 99)), Max: ms(percentile(sorted, 100))}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(float64(len(sorted)) * p / 100))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}
