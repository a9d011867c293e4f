// Package budgetagent is budgetd's client library for Go services: it follows the live
// timeout budgets of the service's call chains and applies them to downstream calls.
//
// Start watches the control plane over gRPC (budget.v1.BudgetControl/Watch), validates every
// config it receives with the same checks and findings as the server (inversion,
// breaker_window, idempotency_ttl), ACKs a good one and NACKs a bad one with the numbers,
// keeping the previous config. It caches the last good config on disk, atomically, and
// starts from it when the control plane is unreachable; it refuses to start on a config with
// an error finding, received or cached.
//
// A service adopts the budgets with one gRPC client interceptor, no call site changed:
//
//	agent, err := budgetagent.Start(ctx, budgetagent.Options{
//		Endpoints: []string{"http://budgetd:50051"}, Token: token,
//		AgentID: "order-1", Service: "order", CachePath: "/var/cache/order/budgets.json"})
//	conn, err := grpc.Dial(inventoryAddr, grpc.WithInsecure(), grpc.WithUnaryInterceptor(
//		agent.UnaryClientInterceptor(map[string]string{"/inventory.v1.Inventory/Reserve": "order->inventory"})))
//
// Each mapped call then gets the segment's per-attempt timeout within the earlier of the
// caller's deadline and now + the segment's budget, and is retried per SPEC R-retry (only
// idempotent segments, only with an idempotency key, never past the budget). Agent.Deadline
// and Agent.Call do the same by hand.
//
// Every call is counted per segment (calls, attempts, retries by cause, one Outcome per call,
// a latency histogram of successful attempts), reported to the control plane every
// ReportWindow with BudgetControl/Report, and exposed as Prometheus collectors (NewMetrics)
// with the Rust agent's names.
//
// The pure rules (Chain.Findings, Decide, AttemptTimeout, Earliest) take every input as an
// argument; they pass the same conformance vectors as the Rust agent (conformance/ at the
// repository root).
package budgetagent

// Version is this module's version; the agent sends "go/<Version>" as its client in
// WatchRequest, shown in fleet status.
const Version = "0.1.0"
