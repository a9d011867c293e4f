package main

// The Watch streams: plain BudgetControl client streams spread over a few connections, and the
// arrivals of each round's revision on them.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/budgetd/budgetd/clients/go/internal/pb"
	"github.com/budgetd/budgetd/clients/go/internal/wire"
)

// grpcTarget turns --grpc (http://host:port, https://host:port or host:port) into a dial
// target and whether to use TLS; the host must be loopback.
func grpcTarget(raw string) (target string, useTLS bool, err error) {
	hostport := raw
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", false, fmt.Errorf("--grpc %q: want http(s)://host:port", raw)
		}
		hostport, useTLS = u.Host, u.Scheme == "https"
	}
	host := hostport
	if i := strings.LastIndex(hostport, ":"); i >= 0 {
		host = strings.Trim(hostport[:i], "[]")
	}
	if err := checkLoopback(host); err != nil {
		return "", false, fmt.Errorf("--grpc: %w", err)
	}
	return hostport, useTLS, nil
}

// dial opens one HTTP/2 connection, waiting at most 10 s for it. The flow-control windows are
// fixed and large: many streams share a connection, and each update is a few KiB.
func dial(target string, tlsConfig *tls.Config) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	security := grpc.WithInsecure()
	if tlsConfig != nil {
		security = grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))
	}
	conn, err := grpc.DialContext(ctx, target, security, grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wire.Codec{})),
		grpc.WithInitialWindowSize(256<<10), grpc.WithInitialConnWindowSize(32<<20))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %w", target, err)
	}
	return conn, nil
}

// arrivals counts, per round, the streams that have received the round's revision. An
// arrival costs two atomic operations, so the client does not slow down what it measures.
type arrivals struct {
	n      int32
	epoch  time.Time
	target atomic.Int64 // the revision every stream must reach
	count  atomic.Int32 // streams that have
	first  atomic.Int64 // when the first one did, in ns since epoch
	last   atomic.Int64 // when the last one did, in ns since epoch
	all    chan struct{}

	ended    atomic.Int32 // streams that ended (they never count again)
	firstErr atomic.Value // the first stream's error, a string
}

func newArrivals(n int) *arrivals {
	return &arrivals{n: int32(n), epoch: time.Now(), all: make(chan struct{}, 1)}
}

// arm starts a round: every stream must now reach revision.
func (a *arrivals) arm(revision int64) {
	a.count.Store(0)
	select {
	case <-a.all:
	default:
	}
	a.target.Store(revision)
}

// wait returns when every stream has reached the armed revision, with the times the first
// and the last one did, or an error after limit.
func (a *arrivals) wait(limit time.Duration) (first, last time.Time, err error) {
	select {
	case <-a.all:
		return a.epoch.Add(time.Duration(a.first.Load())), a.epoch.Add(time.Duration(a.last.Load())), nil
	case <-time.After(limit):
		msg := fmt.Sprintf("only %d of %d streams got revision %d within %v", a.count.Load(), a.n, a.target.Load(), limit)
		if ended := a.ended.Load(); ended > 0 {
			msg += fmt.Sprintf(" (%d streams ended, the first with: %v)", ended, a.firstErr.Load())
		}
		return time.Time{}, time.Time{}, fmt.Errorf("%s", msg)
	}
}

// watchAll opens n Watch streams on chain, stream i on conns[i % len(conns)] with token
// tokens[i / streamsPerToken], and counts their arrivals until ctx ends.
func watchAll(ctx context.Context, n int, conns []*grpc.ClientConn, tokens []string, chain, tag string, a *arrivals) *sync.WaitGroup {
	var wg sync.WaitGroup
	client := "go-fanout-bench/" + runtime.Version()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := pb.NewBudgetControlClient(conns[i%len(conns)])
			sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokens[i/streamsPerToken])
			stream, err := c.Watch(sctx, &pb.WatchRequest{
				AgentId: fmt.Sprintf("bench-go-%s-%d", tag, i),
				Service: "bench",
				Chains:  []string{chain},
				Client:  client,
			})
			if err == nil {
				err = a.follow(stream)
			}
			if ctx.Err() == nil {
				a.ended.Add(1)
				a.firstErr.CompareAndSwap(nil, err.Error())
			}
		}(i)
	}
	return &wg
}

// follow counts the stream's arrivals until it ends.
func (a *arrivals) follow(stream pb.BudgetControl_WatchClient) error {
	counted := int64(0)
	for {
		update, err := stream.Recv()
		if err != nil {
			return err
		}
		target := a.target.Load()
		if update.Revision >= target && counted < target {
			counted = target
			arrived := a.count.Add(1)
			if arrived == 1 {
				a.first.Store(int64(time.Since(a.epoch)))
			}
			if arrived == a.n {
				a.last.Store(int64(time.Since(a.epoch)))
				select {
				case a.all <- struct{}{}:
				default:
				}
			}
		}
	}
}
