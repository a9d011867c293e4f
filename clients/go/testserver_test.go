package budgetagent

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real budgetd process for the integration tests, driven through its HTTP API as an
// operator would (tokens, topology, runs, approvals, rollback), plus loopback helpers.

// budgetdBinary is the server to test against: $BUDGETD_BIN, else the workspace's debug build.
// Without one the test fails (it never skips): the Go agent is only done against a real
// server.
func budgetdBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("BUDGETD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("BUDGETD_BIN=%s: %v", bin, err)
		}
		return bin
	}
	// The physical directory: in GOPATH mode the package is reached through a symlink.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.EvalSymlinks(wd)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(here, "..", "..", "target", "debug", "budgetd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no budgetd binary at %s: build it with `cargo build --bin budgetd` at the repository root, or set BUDGETD_BIN", bin)
	}
	return bin
}

// freeAddr is a loopback address with a port free now (the listener is closed again).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// budgetd is one `budgetd serve` process on fixed loopback ports, restartable on them.
type budgetd struct {
	t                  *testing.T
	bin, dataDir, log  string
	httpAddr, grpcAddr string
	admin              string
	tlsFiles           []string // cert and key, when serving TLS
	client             *http.Client
	scheme             string
	cmd                *exec.Cmd
	exited             chan struct{}
}

// startBudgetd runs budgetd on a fresh data directory with an admin token it chose.
func startBudgetd(t *testing.T, tlsFiles ...string) *budgetd {
	t.Helper()
	dir := t.TempDir()
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	b := &budgetd{
		t: t, bin: budgetdBinary(t), dataDir: filepath.Join(dir, "data"), log: filepath.Join(dir, "budgetd.log"),
		httpAddr: freeAddr(t), grpcAddr: freeAddr(t), admin: hex.EncodeToString(secret),
		tlsFiles: tlsFiles, client: &http.Client{Timeout: 10 * time.Second}, scheme: "http",
	}
	if len(tlsFiles) == 3 {
		b.scheme = "https"
		b.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: readPool(t, tlsFiles[2])}}
	}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b.start()
	t.Cleanup(b.stop)
	return b
}

// start runs the process and waits (at most a minute) until it prints its gRPC address.
func (b *budgetd) start() {
	b.t.Helper()
	logFile, err := os.OpenFile(b.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	defer logFile.Close()
	args := []string{"serve", "--http", b.httpAddr, "--grpc", b.grpcAddr, "--data-dir", b.dataDir}
	if len(b.tlsFiles) == 3 {
		args = append(args, "--tls-cert", b.tlsFiles[0], "--tls-key", b.tlsFiles[1])
	}
	cmd := exec.Command(b.bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "BUDGETD_ADMIN_TOKEN=" + b.admin, "RUST_LOG=info,sqlx=warn", "NO_COLOR=1"}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("starting %s: %v", b.bin, err)
	}
	ready := make(chan bool, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "budgetd: gRPC") {
				ready <- true
				break
			}
		}
		// Keep draining so the process never blocks on a full pipe.
		io.Copy(io.Discard, stdout)
	}()
	b.cmd, b.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(b.exited)
	select {
	case <-ready:
	case <-b.exited:
		b.t.Fatalf("budgetd exited at start:\n%s", b.logTail())
	case <-time.After(time.Minute):
		b.t.Fatalf("budgetd did not start within a minute:\n%s", b.logTail())
	}
}

// stop sends SIGTERM (a graceful stop that ends the Watch streams) and waits, killing it
// after 20 s.
func (b *budgetd) stop() {
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(20 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
	if b.t.Failed() {
		b.t.Logf("budgetd log:\n%s", b.logTail())
	}
}

func (b *budgetd) logTail() string {
	data, _ := os.ReadFile(b.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

func (b *budgetd) grpcURL() string { return b.scheme + "://" + b.grpcAddr }

// offline runs another budgetd subcommand (export, import) and waits for it.
func (b *budgetd) offline(args ...string) {
	b.t.Helper()
	cmd := exec.Command(b.bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		b.t.Fatalf("budgetd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// call sends one API request; body is JSON (a []byte is sent as is). It returns the status
// and the decoded answer.
func (b *budgetd) call(method, path, token string, body interface{}) (int, map[string]interface{}) {
	b.t.Helper()
	var payload io.Reader
	switch v := body.(type) {
	case nil:
	case []byte:
		payload = bytes.NewReader(v)
	default:
		data, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		payload = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.scheme+"://"+b.httpAddr+"/api/v1"+path, payload)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("authorization", "Bearer "+token)
	req.Header.Set("content-type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	var answer map[string]interface{}
	json.Unmarshal(data, &answer)
	return resp.StatusCode, answer
}

// ok is call, requiring a 2xx answer.
func (b *budgetd) ok(method, path, token string, body interface{}) map[string]interface{} {
	b.t.Helper()
	code, answer := b.call(method, path, token, body)
	if code/100 != 2 {
		b.t.Fatalf("%s %s: HTTP %d %v", method, path, code, answer)
	}
	return answer
}

// token creates a token of role whose owner is its name, and returns its secret.
func (b *budgetd) token(role, name string) string {
	b.t.Helper()
	return str(b.t, b.ok("POST", "/tokens", b.admin, map[string]string{"role": role, "name": name}), "token")
}

// example is a file of schemas/examples, the SPEC §4 inputs.
func example(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func str(t *testing.T, m map[string]interface{}, field string) string {
	t.Helper()
	s, ok := m[field].(string)
	if !ok {
		t.Fatalf("no string %q in %v", field, m)
	}
	return s
}

func num(t *testing.T, m map[string]interface{}, field string) int64 {
	t.Helper()
	n, ok := m[field].(float64)
	if !ok {
		t.Fatalf("no number %q in %v", field, m)
	}
	return int64(n)
}

// eventually polls cond every 20 ms until it holds, failing the test after limit.
func eventually(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedEndpoint is an http:// endpoint where nothing listens.
func closedEndpoint(t *testing.T) string { return "http://" + freeAddr(t) }

// testCA writes a CA and a certificate for 127.0.0.1 signed by it into a temporary
// directory: the server's cert and key files and the CA file, in that order.
func testCA(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "budgetd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "budgetd.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"budgetd.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")}
	for i, block := range []*pem.Block{
		{Type: "CERTIFICATE", Bytes: leafDER}, {Type: "PRIVATE KEY", Bytes: keyDER}, {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(files[i], pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func readPool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return pool
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Sprint(err))
	}
}
