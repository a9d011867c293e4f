package main

// The downstream of the example: an inventory service with one unary method,
// /inventory.v1.Inventory/Reserve. Its messages are plain Go structs sent as JSON (a gRPC codec
// selected by the content-subtype), so the example needs no generated code; a real service
// would use its protobuf stubs the same way.

import (
	"context"
	"encoding/json"
	"math/rand"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// reserveMethod is the full method name the interceptor maps to the segment order->inventory.
const reserveMethod = "/inventory.v1.Inventory/Reserve"

type reserveRequest struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

type reserveReply struct {
	Reservation string `json:"reservation"`
	// Repeat is true when the order id had been seen: the callee de-duplicates retries.
	Repeat bool `json:"repeat"`
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v interface{}) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v interface{}) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                               { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// inventoryClient is the order service's stub.
type inventoryClient struct{ conn *grpc.ClientConn }

func (c inventoryClient) Reserve(ctx context.Context, req *reserveRequest, opts ...grpc.CallOption) (*reserveReply, error) {
	reply := new(reserveReply)
	opts = append(opts, grpc.CallContentSubtype("json"))
	if err := c.conn.Invoke(ctx, reserveMethod, req, reply, opts...); err != nil {
		return nil, err
	}
	return reply, nil
}

// inventory answers in about 5–30 ms, and a share `slow` of requests in 120 ms: past
// order->inventory's 44 ms timeout, so the order service retries them (same order id).
type inventory struct {
	slow float64

	mu   sync.Mutex
	seen map[string]string
}

func (inv *inventory) reserve(ctx context.Context, req *reserveRequest) (*reserveReply, error) {
	if req.OrderID == "" || req.Qty <= 0 {
		return nil, status.Error(codes.InvalidArgument, "order_id and a positive qty are required")
	}
	delay := time.Duration(5+rand.Intn(25)) * time.Millisecond
	if rand.Float64() < inv.slow {
		delay = 120 * time.Millisecond
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if id, ok := inv.seen[req.OrderID]; ok {
		return &reserveReply{Reservation: id, Repeat: true}, nil
	}
	id := "rsv-" + req.OrderID
	inv.seen[req.OrderID] = id
	return &reserveReply{Reservation: id}, nil
}

// register adds the service to s by hand, as generated code would.
func (inv *inventory) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "inventory.v1.Inventory",
		HandlerType: (*interface{})(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Reserve",
			Handler: func(_ interface{}, ctx context.Context, decode func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
				req := new(reserveRequest)
				if err := decode(req); err != nil {
					return nil, err
				}
				return inv.reserve(ctx, req)
			},
		}},
	}, inv)
}
