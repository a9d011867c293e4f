// Command order is a small service following budgetd's live budgets: its HTTP endpoint
// POST /orders?id=ORDER reserves stock by calling inventory over gRPC, and the budget agent's
// interceptor gives that call the segment order->inventory's timeout and retry plan. No call
// site names a timeout.
//
// Against a local budgetd with SPEC example A approved (see the repository's README), and an
// agent token:
//
//	BUDGET_AGENT_TOKEN=… go run ./examples/order --budgetd http://127.0.0.1:50051
//	curl -X POST 'http://127.0.0.1:8081/orders?id=42'
//
// Without --inventory it serves a built-in inventory on loopback, a share of whose answers
// (--slow) come after 120 ms: past the 44 ms timeout, so the agent retries them once with
// the same order id (its idempotency key). The agent's Prometheus series are on /metrics.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	budgetagent "github.com/budgetd/budgetd/clients/go"
)

func main() {
	endpoint := flag.String("budgetd", "http://127.0.0.1:50051", "budgetd's gRPC endpoint")
	listen := flag.String("listen", "127.0.0.1:8081", "this service's HTTP address")
	inventoryAddr := flag.String("inventory", "", "inventory's gRPC address (empty: a built-in one on loopback)")
	slow := flag.Float64("slow", 0.1, "share of the built-in inventory's answers that take 120 ms")
	cache := flag.String("cache", filepath.Join(os.TempDir(), "order-budgets.json"), "where the agent caches the last good budgets")
	flag.Parse()
	token := os.Getenv("BUDGET_AGENT_TOKEN")
	if token == "" {
		log.Fatal("set BUDGET_AGENT_TOKEN to a token of role agent (budgetctl token create --role agent --name order-1)")
	}
	host, _ := os.Hostname()

	metrics, err := budgetagent.NewMetrics(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	agent, err := budgetagent.Start(ctx, budgetagent.Options{
		Endpoints: []string{*endpoint},
		Token:     token,
		AgentID:   "order-" + host,
		Service:   "order",
		Labels:    map[string]string{"host": host, "version": "example"},
		CachePath: *cache,
		Metrics:   metrics,
	})
	if err != nil {
		log.Fatalf("no budgets, not starting: %v", err)
	}
	defer agent.Close()
	log.Printf("budgets at revision %d (from the %v)", agent.Snapshot().Revision, agent.Source())

	if *inventoryAddr == "" {
		*inventoryAddr = serveInventory(*slow)
	}
	// The adoption: one interceptor, each method mapped to its segment, the idempotency key
	// taken from the outgoing metadata the callee de-duplicates on.
	conn, err := grpc.Dial(*inventoryAddr, grpc.WithInsecure(), grpc.WithUnaryInterceptor(
		agent.UnaryClientInterceptor(map[string]string{reserveMethod: "order->inventory"},
			budgetagent.KeyFromMetadata("idempotency-key"))))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	inventory := inventoryClient{conn: conn}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	mux.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		if r.Method != http.MethodPost || id == "" {
			http.Error(w, "POST /orders?id=ORDER", http.StatusBadRequest)
			return
		}
		// The request's own deadline, if its caller set one, is inherited by the call.
		ctx := metadata.AppendToOutgoingContext(r.Context(), "idempotency-key", id)
		began := time.Now()
		reply, err := inventory.Reserve(ctx, &reserveRequest{OrderID: id, SKU: "sku-1", Qty: 1})
		took := time.Since(began).Round(time.Millisecond).String()
		w.Header().Set("content-type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]string{"error": status.Convert(err).Message(), "code": status.Code(err).String(), "took": took})
			return
		}
		json.NewEncoder(w).Encode(map[string]interface{}{"reservation": reply.Reservation, "repeat": reply.Repeat, "took": took})
	})
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		server.Shutdown(shutdown)
	}()
	log.Printf("order on http://%s (POST /orders?id=…, GET /metrics), inventory at %s", *listen, *inventoryAddr)
	if err := server.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// serveInventory starts the built-in inventory on a free loopback port.
func serveInventory(slow float64) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	(&inventory{slow: slow, seen: map[string]string{}}).register(s)
	go s.Serve(l)
	return l.Addr().String()
}
