package budgetagent

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClientInterceptor applies the live budgets to a gRPC client with no call site
// changed: a method found in segments (full method name, "/inventory.v1.Inventory/Reserve",
// → segment id, "order->inventory") runs through Call — its attempts get the segment's
// timeout within the earlier of the caller's deadline and now + the segment's budget, and
// DEADLINE_EXCEEDED / UNAVAILABLE are retried per the segment's plan when the call carries an
// idempotency key (see IdempotencyKey, KeyFromMetadata and KeyFromRequest). Other methods,
// and segments the live config does not know, pass straight through.
//
//	conn, err := grpc.Dial(addr, grpc.WithInsecure(),
//		grpc.WithUnaryInterceptor(agent.UnaryClientInterceptor(map[string]string{
//			"/inventory.v1.Inventory/Reserve": "order->inventory",
//		}, budgetagent.KeyFromMetadata("idempotency-key"))))
func (a *Agent) UnaryClientInterceptor(segments map[string]string, opts ...InterceptorOption) grpc.UnaryClientInterceptor {
	methods := make(map[string]string, len(segments))
	for method, segment := range segments {
		methods[method] = segment
	}
	var cfg interceptorConfig
	for _, o := range opts {
		o(&cfg)
	}
	var warned sync.Map
	return func(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		segment, ok := methods[method]
		if !ok {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		key, callOpts := cfg.key(ctx, method, req, callOpts)
		err := a.Call(ctx, segment, key, func(ctx context.Context, _ Attempt) error {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		})
		if errors.Is(err, ErrUnknownSegment) {
			if _, seen := warned.LoadOrStore(segment, true); !seen {
				a.opts.Logger.Printf("segment %q of %s is not in the live budgets; calling without a budget", segment, method)
			}
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		return err
	}
}

// InterceptorOption configures UnaryClientInterceptor: where a call's idempotency key comes
// from. A call without a key is never retried.
type InterceptorOption func(*interceptorConfig)

type interceptorConfig struct {
	fromMetadata string
	fromRequest  func(method string, req interface{}) string
}

// KeyFromMetadata takes a call's idempotency key from the outgoing metadata key name (set
// with metadata.AppendToOutgoingContext), the header the callee de-duplicates on.
func KeyFromMetadata(name string) InterceptorOption {
	return func(c *interceptorConfig) { c.fromMetadata = name }
}

// KeyFromRequest takes a call's idempotency key from its request, e.g. the order id of a
// Reserve; an empty key means none.
func KeyFromRequest(key func(method string, req interface{}) string) InterceptorOption {
	return func(c *interceptorConfig) { c.fromRequest = key }
}

// IdempotencyKey is a call option giving one call's idempotency key to the interceptor:
// client.Reserve(ctx, req, budgetagent.IdempotencyKey(orderID)). It wins over the
// interceptor's own options.
func IdempotencyKey(key string) grpc.CallOption {
	return idempotencyKeyOption{key: key}
}

type idempotencyKeyOption struct {
	grpc.EmptyCallOption
	key string
}

// key is the call's idempotency key, and the call options without IdempotencyKey's.
func (c *interceptorConfig) key(ctx context.Context, method string, req interface{}, opts []grpc.CallOption) (string, []grpc.CallOption) {
	key, rest := "", opts[:0:0]
	found := false
	for _, o := range opts {
		if k, ok := o.(idempotencyKeyOption); ok {
			key, found = k.key, true
			continue
		}
		rest = append(rest, o)
	}
	if found {
		return key, rest
	}
	if c.fromMetadata != "" {
		if md, ok := metadata.FromOutgoingContext(ctx); ok {
			if values := md.Get(c.fromMetadata); len(values) > 0 {
				return values[0], rest
			}
		}
	}
	if c.fromRequest != nil {
		return c.fromRequest(method, req), rest
	}
	return "", rest
}
