package budgetagent

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CacheFormatError is a cache file that exists but is not a cached config: truncated, not
// JSON, or a value of the wrong shape.
type CacheFormatError struct {
	Path string
	Err  error
}

func (e *CacheFormatError) Error() string {
	return fmt.Sprintf("%s is not a cached budget config: %v", e.Path, e.Err)
}

func (e *CacheFormatError) Unwrap() error { return e.Err }

// ReadCache reads the snapshot cached at path, the file an agent starts from when the
// control plane is down. It is not validated: check it (Snapshot.Check) before use. A missing
// file is an error that matches fs.ErrNotExist; a malformed one is a *CacheFormatError.
func ReadCache(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	s, err := ParseSnapshot(data)
	if err != nil {
		return nil, &CacheFormatError{Path: path, Err: err}
	}
	return s, nil
}

// WriteCache replaces the snapshot cached at path, creating its directory if needed. The
// new file is written beside the old one, synced, then renamed over it, so a crash leaves
// either the old config or the new one, never half of one; on failure the temporary file
// is removed and the old file is untouched. The format is the Rust agent's, byte for byte.
func WriteCache(path string, s *Snapshot) error {
	if s == nil {
		return errors.New("no snapshot to cache")
	}
	data, err := encodeCache(s)
	if err != nil {
		return err
	}
	dir, name := filepath.Split(path)
	if name == "" {
		return fmt.Errorf("%s names no file", path)
	}
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d-%s", name, os.Getpid(), hex.EncodeToString(suffix)))
	if err := writeThenRename(tmp, path, data); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	syncDir(dir)
	return nil
}

// encodeCache is the snapshot as the Rust agent writes it: two-space indented JSON and a
// final newline.
func encodeCache(s *Snapshot) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeThenRename(tmp, path string, data []byte) error {
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// syncDir makes the rename itself durable where directories can be synced; best effort, as
// the new file is already complete either way.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
