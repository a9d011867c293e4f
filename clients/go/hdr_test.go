package budgetagent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codahale/hdrhistogram"
)

// rustFixture is testdata/hdr_rust_v2.txt: values and the Rust crate's encodings of them.
type rustFixture struct {
	values   [][2]int64 // (value, count)
	encoding map[string][]byte
}

func readRustFixture(t *testing.T) rustFixture {
	t.Helper()
	f, err := os.Open("testdata/hdr_rust_v2.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fx := rustFixture{encoding: map[string][]byte{}}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		switch {
		case len(fields) == 0 || fields[0] == "#":
		case fields[0] == "values":
			for _, pair := range fields[1:] {
				v, n, _ := strings.Cut(pair, ":")
				value, err1 := strconv.ParseInt(v, 10, 64)
				count, err2 := strconv.ParseInt(n, 10, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("bad pair %q", pair)
				}
				fx.values = append(fx.values, [2]int64{value, count})
			}
		case len(fields) == 3:
			b, err := hex.DecodeString(fields[2])
			if err != nil {
				t.Fatalf("%s %s: %v", fields[0], fields[1], err)
			}
			fx.encoding[fields[0]+" "+fields[1]] = b
		default:
			t.Fatalf("unexpected line %q", lines.Text())
		}
	}
	if len(fx.values) == 0 || len(fx.encoding) != 4 {
		t.Fatalf("incomplete fixture: %d values, %d encodings", len(fx.values), len(fx.encoding))
	}
	return fx
}

func histogramOf(t *testing.T, values [][2]int64) *hdrhistogram.Histogram {
	t.Helper()
	h := newLatencyHistogram()
	for _, vn := range values {
		if err := h.RecordValues(vn[0], vn[1]); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestTheEncodingIsTheRustCratesByteForByte(t *testing.T) {
	fx := readRustFixture(t)
	h := histogramOf(t, fx.values)
	rustV2 := fx.encoding["bounded v2"]

	if got := encodeV2(h.Export()); !bytes.Equal(got, rustV2) {
		t.Fatalf("V2 form differs from the Rust crate's:\n go   %x\n rust %x", got, rustV2)
	}
	// Deflate output differs between zlib implementations; what the stream holds must not.
	compressed := encodeLatencies(h)
	if cookie := binary.BigEndian.Uint32(compressed); cookie != 0x1c849314 {
		t.Fatalf("cookie %#x", cookie)
	}
	if n := binary.BigEndian.Uint32(compressed[4:]); int(n) != len(compressed)-8 {
		t.Fatalf("length field %d for %d bytes of stream", n, len(compressed)-8)
	}
	inflated, err := inflateV2(compressed)
	if err != nil || !bytes.Equal(inflated, rustV2) {
		t.Fatalf("inflated %x, %v; want %x", inflated, err, rustV2)
	}
	rustInflated, err := inflateV2(fx.encoding["bounded v2deflate"])
	if err != nil || !bytes.Equal(rustInflated, rustV2) {
		t.Fatalf("the Rust compressed form inflates to %x, %v", rustInflated, err)
	}
}

func TestRustEncodingsDecodeToTheSameHistogram(t *testing.T) {
	fx := readRustFixture(t)
	want := histogramOf(t, fx.values)
	for _, name := range []string{"bounded v2deflate", "auto v2deflate"} {
		got := newLatencyHistogram()
		if err := decodeLatenciesInto(got, fx.encoding[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.Equals(want) {
			t.Errorf("%s decodes to %v, want %v", name, got.Distribution(), want.Distribution())
		}
	}
}

func TestDecodingAnotherLayoutKeepsEachBucketsLowestValue(t *testing.T) {
	coarse := hdrhistogram.New(1000, maxLatencyUS, 2)
	for _, v := range []int64{123_456, 123_456, 2_000_000} {
		if err := coarse.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	h := newLatencyHistogram()
	if err := decodeLatenciesInto(h, compressV2(encodeV2(coarse.Export()))); err != nil {
		t.Fatal(err)
	}
	// 2 significant digits above a lowest value of 1000 (a unit of 512 µs): 123 456 µs falls in
	// the bucket [241×512, 242×512), 2 000 000 µs in [244×8192, 245×8192).
	want := [][2]int64{{123_392, 2}, {1_998_848, 1}}
	var got [][2]int64
	for _, bar := range h.Distribution() {
		if bar.Count > 0 {
			got = append(got, [2]int64{bar.From, bar.Count})
		}
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("buckets %v, want %v", got, want)
	}
}

func TestLatenciesAreWholeMicrosecondsClampedToAnHour(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want int64
	}{
		{1500 * time.Microsecond, 1500},
		{1999 * time.Nanosecond, 1},
		{-time.Second, 0},
		{2 * time.Hour, maxLatencyUS},
		{time.Duration(math.MaxInt64), maxLatencyUS},
	} {
		if got := latencyUS(c.in); got != c.want {
			t.Errorf("latencyUS(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	h := newLatencyHistogram()
	if err := h.RecordValue(latencyUS(100 * time.Hour)); err != nil {
		t.Fatalf("the clamp must fit the histogram: %v", err)
	}
}

func TestVarintsTakeAtMostNineBytes(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		size int
	}{
		{0, 1}, {127, 1}, {128, 2}, {1<<56 - 1, 8}, {1 << 56, 9}, {math.MaxUint64, 9},
	} {
		b := appendVarint(nil, c.v)
		got, took, ok := readVarint(append(b, 0xff))
		if len(b) != c.size || !ok || took != c.size || got != c.v {
			t.Errorf("%d: %x read back as %d (%d bytes, %v)", c.v, b, got, took, ok)
		}
	}
	if _, _, ok := readVarint([]byte{0x80, 0x80}); ok {
		t.Error("a cut varint must not read")
	}
	for _, n := range []int64{0, 1, -1, 5_000_000_000, math.MinInt64, math.MaxInt64} {
		if got := unZigZag(zigZag(n)); got != n {
			t.Errorf("zig-zag %d -> %d", n, got)
		}
	}
}

func TestMergingEncodedLatenciesAddsThem(t *testing.T) {
	a := histogramOf(t, [][2]int64{{1000, 2}, {5000, 1}})
	b := histogramOf(t, [][2]int64{{1000, 1}, {70_000, 4}})
	merged, err := mergeLatencies(encodeLatencies(a), encodeLatencies(b))
	if err != nil {
		t.Fatal(err)
	}
	got := newLatencyHistogram()
	if err := decodeLatenciesInto(got, merged); err != nil {
		t.Fatal(err)
	}
	want := histogramOf(t, [][2]int64{{1000, 3}, {5000, 1}, {70_000, 4}})
	if !got.Equals(want) {
		t.Errorf("merged %v, want %v", got.Distribution(), want.Distribution())
	}
	// No latency on one side keeps the other's bytes as they are.
	enc := encodeLatencies(a)
	if m, _ := mergeLatencies(nil, enc); !bytes.Equal(m, enc) {
		t.Error("nil + a must be a")
	}
	if m, _ := mergeLatencies(enc, nil); !bytes.Equal(m, enc) {
		t.Error("a + nil must be a")
	}
	if encodeLatencies(newLatencyHistogram()) != nil {
		t.Error("an empty histogram is sent as no bytes")
	}
}

func TestDecodingRefusesWhatIsNotABoundedHistogram(t *testing.T) {
	good := encodeLatencies(histogramOf(t, [][2]int64{{1000, 1}}))
	bad := map[string][]byte{
		"garbage":       {1, 2, 3},
		"uncompressed":  encodeV2(histogramOf(t, [][2]int64{{1000, 1}}).Export()),
		"truncated":     good[:len(good)-3],
		"too large":     append(append([]byte{}, good[:8]...), make([]byte, maxCompressedLen)...),
		"zero figures":  compressV2(withUint32(encodeV2(newLatencyHistogram().Export()), 12, 0)),
		"index offset":  compressV2(withUint32(encodeV2(newLatencyHistogram().Export()), 8, 4)),
		"payload short": compressV2(withUint32(encodeV2(newLatencyHistogram().Export()), 4, 99)),
		// A zero run so long that the next count's value overflows 64 bits.
		"beyond range": compressV2(v2WithPayload(appendVarint(appendVarint(nil, zigZag(-(1<<40))), zigZag(1)))),
	}
	for name, b := range bad {
		if err := decodeLatenciesInto(newLatencyHistogram(), b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if err := decodeLatenciesInto(newLatencyHistogram(), nil); err != nil {
		t.Errorf("no bytes are no latency: %v", err)
	}
}

func withUint32(b []byte, at int, v uint32) []byte {
	binary.BigEndian.PutUint32(b[at:], v)
	return b
}

// v2WithPayload is a V2 form of this agent's layout with the given payload.
func v2WithPayload(payload []byte) []byte {
	b := append(encodeV2(newLatencyHistogram().Export())[:v2HeaderLen], payload...)
	return withUint32(b, 4, uint32(len(payload)))
}
