package budgetagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/ioutil"
	"log"
	"net"
	"net/url"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/budgetd/budgetd/clients/go/internal/wire"
)

// Logger receives the agent's log lines: configs applied or refused, reconnects, retries
// (`retry=n cause=…`). *log.Logger satisfies it.
type Logger interface {
	Printf(format string, args ...interface{})
}

// Options says how an agent reaches the control plane, who it is and what it watches.
// Endpoints, Token, AgentID and Service are required; zero durations take the defaults.
type Options struct {
	// Endpoints are budgetd's gRPC addresses, tried in this order, e.g.
	// "http://127.0.0.1:50051" (plaintext HTTP/2) or "https://budgetd.internal:50051" (TLS,
	// the server's certificate verified). A broken stream reconnects to the next one.
	Endpoints []string
	// Token is a bearer token with role agent, sent as `authorization: Bearer <token>` on
	// every call to the control plane. Never logged.
	Token string
	// AgentID is the stable id of this agent instance, e.g. "order-7f9c-1".
	AgentID string
	// Service is the service the agent runs in.
	Service string
	// Chains are the chains to watch; empty means every chain where Service is a caller or
	// callee.
	Chains []string
	// Labels are free-form labels shown in fleet status (host, version …); a canary rollout
	// may select agents by them (budgetctl baseline approve --canary zone=a).
	Labels map[string]string
	// CAFile is a PEM file of the CAs that signed budgetd's certificate: with it only they
	// are trusted, without it the system's roots. It needs https:// endpoints.
	CAFile string
	// TLSServerName is the name the server's certificate must carry when it differs from
	// the endpoint's host (e.g. connecting by IP address).
	TLSServerName string
	// CachePath is where the last good config is written; empty disables the cache.
	CachePath string
	// ConnectTimeout bounds opening a watch stream (default 3 s).
	ConnectTimeout time.Duration
	// FirstConfigTimeout bounds the wait for the first config once the stream is open
	// (default 5 s); past it the agent starts from the cache.
	FirstConfigTimeout time.Duration
	// ReportWindow is the length of a reporting window (default 10 s); it must divide a
	// minute.
	ReportWindow time.Duration
	// Metrics, when set, receives the calls' counts as Prometheus series (NewMetrics).
	Metrics *Metrics
	// Classify tells what kind of failure an error of a downstream call is; nil means
	// DefaultClassify (gRPC status codes and context errors).
	Classify func(error) Failure
	// Logger receives the agent's log lines; nil means the standard logger's output with a
	// "budgetagent: " prefix.
	Logger Logger
}

// The defaults of Options, the same as the Rust agent's.
const (
	DefaultConnectTimeout     = 3 * time.Second
	DefaultFirstConfigTimeout = 5 * time.Second
	DefaultReportWindow       = 10 * time.Second
)

// String shows the options with the token redacted, so logging them never leaks it.
func (o Options) String() string {
	if o.Token != "" {
		o.Token = "<redacted>"
	}
	type shown Options
	return fmt.Sprintf("%+v", shown(o))
}

// GoString is String, for %#v.
func (o Options) GoString() string { return o.String() }

// endpoint is one control-plane replica: the address to dial and how.
type endpoint struct {
	url    string
	target string
	tls    bool
}

// withDefaults fills the zero fields of a copy of o.
func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.FirstConfigTimeout <= 0 {
		o.FirstConfigTimeout = DefaultFirstConfigTimeout
	}
	if o.ReportWindow <= 0 {
		o.ReportWindow = DefaultReportWindow
	}
	if o.Classify == nil {
		o.Classify = DefaultClassify
	}
	if o.Logger == nil {
		o.Logger = log.New(log.Writer(), "budgetagent: ", log.LstdFlags)
	}
	return o
}

// configError is an unusable Options field.
func configError(format string, args ...interface{}) error {
	return fmt.Errorf("budgetagent: invalid options: "+format, args...)
}

// endpoints parses and checks every endpoint, in failover order.
func (o *Options) endpoints() ([]endpoint, error) {
	if len(o.Endpoints) == 0 {
		return nil, configError("no endpoint")
	}
	list := make([]endpoint, 0, len(o.Endpoints))
	for _, raw := range o.Endpoints {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, configError("endpoint %q: %v", raw, err)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Host == "" {
			return nil, configError("endpoint %q: want scheme://host:port and nothing else", raw)
		}
		e := endpoint{url: raw, target: u.Host}
		switch u.Scheme {
		case "http":
			if o.CAFile != "" || o.TLSServerName != "" {
				// Plaintext with a CA set would silently go unencrypted.
				return nil, configError("CAFile/TLSServerName need https:// endpoints, not %q", raw)
			}
			if u.Port() == "" {
				e.target = net.JoinHostPort(u.Hostname(), "80")
			}
		case "https":
			e.tls = true
			if u.Port() == "" {
				e.target = net.JoinHostPort(u.Hostname(), "443")
			}
		default:
			return nil, configError("endpoint %q: scheme must be http or https", raw)
		}
		list = append(list, e)
	}
	return list, nil
}

// check validates the fields that need no I/O.
func (o *Options) check() error {
	if o.AgentID == "" {
		return configError("AgentID must not be empty")
	}
	if o.Service == "" {
		return configError("Service must not be empty")
	}
	if o.Token == "" {
		return configError("Token must not be empty")
	}
	for i := 0; i < len(o.Token); i++ {
		if c := o.Token[i]; c < 0x20 || c > 0x7e {
			return configError("Token is not a valid header value (printable ASCII only)")
		}
	}
	return nil
}

// dialOptions are the gRPC options every connection to the control plane uses: TLS when
// tls is set (CAFile or the system's roots), keep-alive pings that detect a half-open
// watch stream, and the token on every RPC.
func (o *Options) dialOptions(tlsConfig *tls.Config) []grpc.DialOption {
	creds := grpc.WithInsecure()
	if tlsConfig != nil {
		creds = grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))
	}
	return []grpc.DialOption{
		creds,
		grpc.WithPerRPCCredentials(bearer{token: o.Token}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                30 * time.Second,
			Timeout:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.WithUserAgent("budgetagent-go/" + Version),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wire.Codec{})),
	}
}

// tlsConfig reads CAFile once at start; nil when no endpoint uses TLS.
func (o *Options) tlsConfig(list []endpoint) (*tls.Config, error) {
	anyTLS := false
	for _, e := range list {
		anyTLS = anyTLS || e.tls
	}
	if !anyTLS {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: o.TLSServerName, MinVersion: tls.VersionTLS12}
	if o.CAFile == "" {
		return cfg, nil
	}
	pem, err := ioutil.ReadFile(o.CAFile)
	if err != nil {
		return nil, configError("cannot read CAFile: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, configError("CAFile %s holds no PEM certificate", o.CAFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// bearer puts the agent token on every RPC as `authorization: Bearer <token>`.
type bearer struct {
	token string
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false: plaintext http:// endpoints (loopback, a mesh
// sidecar) carry the token too, as with the Rust agent.
func (b bearer) RequireTransportSecurity() bool { return false }
