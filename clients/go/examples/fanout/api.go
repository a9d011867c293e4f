package main

// What the benchmark needs from budgetd's HTTP API (/api/v1): tokens, the example chain, one
// publication (upload a run, approve its draft), and the server's resident memory.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// api talks to one budgetd over HTTP with one token.
type api struct {
	base  *url.URL // the server's root, e.g. http://127.0.0.1:8080
	token string
	http  *http.Client
}

// newAPI checks that rawURL is a loopback http(s) URL and makes a client for it, trusting
// only caCert's certificates when given.
func newAPI(rawURL, token, caCert string) (*api, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port", rawURL)
	}
	if err := checkLoopback(u.Hostname()); err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 4}
	if caCert != "" {
		pool, err := loadCAs(caCert)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &api{base: u, token: token, http: &http.Client{Timeout: 30 * time.Second, Transport: transport}}, nil
}

// checkLoopback refuses a host that is not this machine: the benchmark opens thousands of
// streams and publishes configs, which belongs on a test server only.
func checkLoopback(host string) error {
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address; the benchmark runs against a local budgetd only", host)
}

func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read --ca-cert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-cert %s holds no PEM certificate", path)
	}
	return pool, nil
}

// as is the same server with another token.
func (a *api) as(token string) *api {
	c := *a
	c.token = token
	return &c
}

// call sends one request under /api/v1 and decodes a JSON answer into out (if not nil).
func (a *api) call(method string, path []string, body interface{}, out interface{}) error {
	escaped := make([]string, len(path))
	for i, p := range path {
		escaped[i] = url.PathEscape(p)
	}
	target := strings.TrimSuffix(a.base.String(), "/") + "/api/v1/" + strings.Join(escaped, "/")
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		reader = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, target, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if reader != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, target, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	return nil
}

// createToken makes a token of role named name and returns its secret.
func (a *api) createToken(role, name string) (string, error) {
	var out struct {
		Token string `json:"token"`
	}
	if err := a.call("POST", []string{"tokens"}, map[string]string{"role": role, "name": name}, &out); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", fmt.Errorf("token %s: no secret in the answer", name)
	}
	return out.Token, nil
}

// revokeToken deletes the token named name.
func (a *api) revokeToken(name string) error {
	return a.call("DELETE", []string{"tokens", name}, nil, nil)
}

// uploadRun uploads run to chain and returns the draft it opened.
func (a *api) uploadRun(chain string, run []byte) (string, error) {
	var out struct {
		BaselineID string `json:"baseline_id"`
	}
	if err := a.call("POST", []string{"chains", chain, "runs"}, run, &out); err != nil {
		return "", err
	}
	if out.BaselineID == "" {
		return "", errors.New("the run opened no draft")
	}
	return out.BaselineID, nil
}

// approve approves a draft and returns the publication's revision.
func (a *api) approve(baselineID string) (int64, error) {
	var out struct {
		Revision *int64 `json:"revision"`
	}
	if err := a.call("POST", []string{"baselines", baselineID, "approve"}, nil, &out); err != nil {
		return 0, err
	}
	if out.Revision == nil {
		return 0, errors.New("approve: no revision in the answer")
	}
	return *out.Revision, nil
}

// rss is the server's process_resident_memory_bytes from /metrics, if it exports it.
func (a *api) rss() (uint64, bool) {
	req, err := http.NewRequest("GET", strings.TrimSuffix(a.base.String(), "/")+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		const name = "process_resident_memory_bytes "
		if line := lines.Text(); strings.HasPrefix(line, name) {
			f, err := strconv.ParseFloat(strings.TrimSpace(line[len(name):]), 64)
			return uint64(f), err == nil
		}
	}
	return 0, false
}

// examples reads the handbook's checkout topology and run A from dir, or from the first
// schemas/examples found in the working directory or above it when dir is empty.
func examples(dir string) (topology, runA []byte, err error) {
	if dir == "" {
		for at, _ := os.Getwd(); ; at = filepath.Dir(at) {
			candidate := filepath.Join(at, "schemas", "examples")
			if _, err := os.Stat(filepath.Join(candidate, "checkout-topology.json")); err == nil {
				dir = candidate
				break
			}
			if at == filepath.Dir(at) {
				return nil, nil, errors.New("no schemas/examples in the working directory or above it; pass --examples")
			}
		}
	}
	if topology, err = os.ReadFile(filepath.Join(dir, "checkout-topology.json")); err != nil {
		return nil, nil, err
	}
	if runA, err = os.ReadFile(filepath.Join(dir, "checkout-run-a.json")); err != nil {
		return nil, nil, err
	}
	return topology, runA, nil
}

// withPaymentP999 is run with order->payment's p999 set to ms: each round drifts it.
func withPaymentP999(run []byte, ms int) ([]byte, error) {
	var doc map[string]interface{}
	if err := json.Unmarshal(run, &doc); err != nil {
		return nil, fmt.Errorf("run A: %w", err)
	}
	segments, _ := doc["segments"].([]interface{})
	for _, s := range segments {
		if seg, ok := s.(map[string]interface{}); ok && seg["id"] == "order->payment" {
			seg["p999_ms"] = ms
			return json.Marshal(doc)
		}
	}
	return nil, errors.New("run A has no order->payment segment")
}
