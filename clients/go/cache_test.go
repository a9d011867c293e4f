package budgetagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func snapshotA(revision int64) *Snapshot {
	return &Snapshot{Revision: revision, Chains: map[string]*Chain{"checkout": exampleA()}}
}

func cacheDirFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestCacheRoundTrips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "deeper", "budgets.json")
	if err := WriteCache(path, snapshotA(7)); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCache(path)
	if err != nil || !reflect.DeepEqual(got, snapshotA(7)) {
		t.Fatalf("ReadCache = %+v, %v", got, err)
	}
	// A second write replaces the first.
	if err := WriteCache(path, snapshotA(9)); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCache(path); err != nil || got.Revision != 9 {
		t.Fatalf("after the second write: %+v, %v", got, err)
	}
}

// The Rust agent's own cache text (from the conformance corpus) is what this client writes
// for the same snapshot, byte for byte.
func TestCacheIsByteForByteTheRustAgents(t *testing.T) {
	var corpus struct {
		Vectors []struct {
			Name string `json:"name"`
			File string `json:"file"`
		} `json:"vectors"`
	}
	data, err := os.ReadFile(filepath.Join(conformanceDir, "cache.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, v := range corpus.Vectors {
		if v.Name != "example-a" && v.Name != "two-chains" {
			continue
		}
		compared++
		s, err := ParseSnapshot([]byte(v.File))
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		path := filepath.Join(t.TempDir(), "budgets.json")
		if err := WriteCache(path, s); err != nil {
			t.Fatal(err)
		}
		written, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(written, []byte(v.File)) {
			t.Errorf("%s: written\n%s\nthe Rust agent writes\n%s", v.Name, written, v.File)
		}
	}
	if compared != 2 {
		t.Fatalf("cache.json lacks example-a or two-chains (compared %d)", compared)
	}
}

func TestCacheWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "budgets.json")
	for revision := int64(1); revision <= 3; revision++ {
		if err := WriteCache(path, snapshotA(revision)); err != nil {
			t.Fatal(err)
		}
	}
	if got := cacheDirFiles(t, dir); !reflect.DeepEqual(got, []string{"budgets.json"}) {
		t.Errorf("files %v", got)
	}
}

func TestAFailedCacheWriteKeepsTheOldFileAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "budgets.json")
	if err := WriteCache(path, snapshotA(7)); err != nil {
		t.Fatal(err)
	}
	// Renaming a file over a non-empty directory fails after the temporary file is written.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteCache(blocked, snapshotA(8)); err == nil {
		t.Fatal("writing over a directory succeeded")
	}
	if got := cacheDirFiles(t, dir); !reflect.DeepEqual(got, []string{"blocked", "budgets.json"}) {
		t.Errorf("files %v: the temporary file was left behind", got)
	}
	if got, err := ReadCache(path); err != nil || got.Revision != 7 {
		t.Errorf("the old cache: %+v, %v", got, err)
	}
	if err := WriteCache(dir+string(filepath.Separator), snapshotA(8)); err == nil {
		t.Error("a path naming no file was written")
	}
	if err := WriteCache(path, nil); err == nil {
		t.Error("a nil snapshot was cached")
	}
}

func TestConcurrentCacheWritesLeaveOneWholeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "budgets.json")
	var wg sync.WaitGroup
	for revision := int64(1); revision <= 8; revision++ {
		wg.Add(1)
		go func(r int64) {
			defer wg.Done()
			if err := WriteCache(path, snapshotA(r)); err != nil {
				t.Error(err)
			}
		}(revision)
	}
	wg.Wait()
	got, err := ReadCache(path)
	if err != nil || got.Revision < 1 || got.Revision > 8 {
		t.Fatalf("after concurrent writes: %+v, %v", got, err)
	}
	if files := cacheDirFiles(t, dir); len(files) != 1 {
		t.Errorf("files %v", files)
	}
}

func TestUnreadableCaches(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	_, err := ReadCache(missing)
	var format *CacheFormatError
	if !errors.Is(err, fs.ErrNotExist) || errors.As(err, &format) {
		t.Errorf("a missing cache: %v", err)
	}
	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte(`{"revision": `), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadCache(garbage)
	if !errors.As(err, &format) || !strings.Contains(err.Error(), "garbage.json") {
		t.Errorf("a truncated cache: %v", err)
	}
}

// Found by FuzzParseChain: a cached segment with timeout_ms and budget_ms 0 passed the checks,
// and an agent started from it failed every call of the segment before its first attempt.
// Such a cache is well formed; what it holds is a structure error, as in the Rust agent, so
// neither client starts from it, and FromSnapshot refuses the same config.
func TestACacheHoldingWhatNoServerDerivesIsNotStartedFrom(t *testing.T) {
	found := `{"chain":"00000000","revision":0,"baseline_id":"000000000000000","published_at":"000000000000000000000000",` +
		`"entry_budget_ms":1,"breaker_window_ms":1,"max_recovery":"00h","segments":[{"id":"gateway->order",` +
		`"caller":"gateway","callee":"order","000000":null,"class":"volatile","timeout_ms":0,"budget_ms":0,` +
		`"retry":{"idempotent":false}} ]}`
	c, err := ParseChain([]byte(found))
	if err != nil {
		t.Fatalf("a well-formed chain was refused as malformed: %v", err)
	}
	want := `chain "00000000", segment "": structure: /segments/0/timeout_ms: must be greater than 0`
	if r := c.refusal(); r == nil || r.Error() != want {
		t.Fatalf("refusal %v, want %s", r, want)
	}

	for name, edit := range map[string]func(s *Segment){
		"a zero timeout":           func(s *Segment) { s.TimeoutMs = 0 },
		"a budget below a timeout": func(s *Segment) { s.BudgetMs = s.TimeoutMs - 1 },
		"11 retries on deadline":   func(s *Segment) { s.Retry.OnDeadline.MaxRetries = MaxRuleRetries + 1 },
	} {
		s := exampleSnapshot(t, "example-a")
		edit(&s.Chains["checkout"].Segments[1])
		path := filepath.Join(t.TempDir(), "budgets.json")
		// WriteCache writes what it is given; checking it once read back is where it is refused.
		if err := WriteCache(path, s); err != nil {
			t.Fatal(err)
		}
		if started, reason := startFromCache(t, path); started != nil || reason != CheckStructure {
			t.Errorf("%s: started %v, reason %q", name, started != nil, reason)
		}
		opts := fakeOptions(path, closedEndpoint(t))
		opts.ConnectTimeout = 100 * time.Millisecond
		if a, err := Start(context.Background(), opts); err == nil {
			a.Close()
			t.Errorf("%s: the agent started from the cache", name)
		}
		var refusal *Refusal
		if a, err := FromSnapshot(s, Options{}); err == nil {
			a.Close()
			t.Errorf("%s: FromSnapshot accepted it", name)
		} else if !errors.As(err, &refusal) || refusal.Check != CheckStructure {
			t.Errorf("%s: FromSnapshot refused with %v, want a structure refusal", name, err)
		}
	}
}
