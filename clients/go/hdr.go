package budgetagent

// Latency histograms and their wire form, HdrHistogram's V2 compressed encoding (SPEC §8:
// `SegmentWindow.latency_hdr`), so that any HdrHistogram implementation reads what this agent
// sends. The codahale histogram lays its counts out as every HdrHistogram does, so its exported
// counts array is the array the encoding run-length codes.
//
// The encoding, big-endian throughout:
//
//	compressed: cookie 0x1c849314 | u32 length of the zlib stream | zlib stream of the V2 form
//	V2:         cookie 0x1c849313 | u32 payload length | u32 normalizing index offset (0) |
//	            u32 significant figures | u64 lowest discernible value |
//	            u64 highest trackable value | f64 integer-to-double ratio (1.0) | payload
//	payload:    the counts array up to the last non-zero count, each a zig-zag LEB128 number
//	            (at most 9 bytes, the ninth holding 8 bits); a run of two or more zeros is one
//	            negative number, minus the run's length.
//
// Bits 4-7 of a cookie carry a word size that readers ignore; decoding masks them out.

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"time"

	"github.com/codahale/hdrhistogram"
)

const (
	// latencyDigits are the significant figures latencies are recorded with (SPEC §8).
	latencyDigits = 3
	// maxLatencyUS is the largest latency recorded, one hour in microseconds: slower attempts
	// are recorded as one hour, which bounds every histogram's size.
	maxLatencyUS int64 = 3_600_000_000

	v2Cookie           uint32 = 0x1c849313
	v2CompressedCookie uint32 = 0x1c849314
	cookieWordSizeBits uint32 = 0xf0
	v2HeaderLen               = 40

	// Bounds when decoding, so a corrupt histogram cannot make the agent allocate much.
	maxCompressedLen = 64 << 10
	maxInflatedLen   = 1 << 20
)

// newLatencyHistogram is an empty histogram for latencies in microseconds, 0 to one hour at 3
// significant digits: 23 buckets of 1024 counts (188 KiB), allocated once per segment.
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, maxLatencyUS, latencyDigits)
}

// latencyUS is d in whole microseconds, within 0 and maxLatencyUS.
func latencyUS(d time.Duration) int64 {
	us := d.Microseconds()
	if us < 0 {
		return 0
	}
	if us > maxLatencyUS {
		return maxLatencyUS
	}
	return us
}

// encodeLatencies is the compressed V2 encoding of h, or nil when h holds no latency (the
// control plane reads empty bytes as an empty histogram).
func encodeLatencies(h *hdrhistogram.Histogram) []byte {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	return compressV2(encodeV2(h.Export()))
}

// encodeV2 is the uncompressed V2 form of a histogram.
func encodeV2(s *hdrhistogram.Snapshot) []byte {
	last := len(s.Counts) - 1
	for last > 0 && s.Counts[last] == 0 {
		last--
	}
	out := make([]byte, v2HeaderLen, v2HeaderLen+16)
	binary.BigEndian.PutUint32(out[0:], v2Cookie)
	binary.BigEndian.PutUint32(out[8:], 0)
	binary.BigEndian.PutUint32(out[12:], uint32(s.SignificantFigures))
	binary.BigEndian.PutUint64(out[16:], uint64(s.LowestTrackableValue))
	binary.BigEndian.PutUint64(out[24:], uint64(s.HighestTrackableValue))
	binary.BigEndian.PutUint64(out[32:], math.Float64bits(1.0))
	for i := 0; i <= last && i < len(s.Counts); {
		if s.Counts[i] != 0 {
			out = appendVarint(out, zigZag(s.Counts[i]))
			i++
			continue
		}
		run := 1
		for i+run <= last && s.Counts[i+run] == 0 {
			run++
		}
		if run == 1 {
			out = appendVarint(out, zigZag(0))
		} else {
			out = appendVarint(out, zigZag(-int64(run)))
		}
		i += run
	}
	binary.BigEndian.PutUint32(out[4:], uint32(len(out)-v2HeaderLen))
	return out
}

// compressV2 wraps a V2 form in the compressed encoding.
func compressV2(v2 []byte) []byte {
	var out bytes.Buffer
	out.Grow(8 + len(v2))
	var header [8]byte
	binary.BigEndian.PutUint32(header[:], v2CompressedCookie)
	out.Write(header[:])
	z := zlib.NewWriter(&out)
	// Writing to memory cannot fail.
	_, _ = z.Write(v2)
	_ = z.Close()
	b := out.Bytes()
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

func zigZag(n int64) uint64 {
	return uint64(n<<1) ^ uint64(n>>63)
}

func unZigZag(u uint64) int64 {
	return int64(u>>1) ^ -int64(u&1)
}

// appendVarint appends v as LEB128 of at most 9 bytes: eight 7-bit groups, then a ninth byte
// with the top 8 bits, as HdrHistogram's encoding has it.
func appendVarint(b []byte, v uint64) []byte {
	for i := 0; i < 8; i++ {
		if v < 0x80 {
			return append(b, byte(v))
		}
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// readVarint reads one number written by appendVarint and the bytes it took.
func readVarint(b []byte) (uint64, int, bool) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ {
		if i == 8 {
			return v | uint64(b[i])<<56, 9, true
		}
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, true
		}
	}
	return 0, 0, false
}

// inflateV2 checks the compressed wrapper and returns the V2 form inside it.
func inflateV2(b []byte) ([]byte, error) {
	if len(b) > maxCompressedLen {
		return nil, fmt.Errorf("latency histogram is %d bytes; at most %d", len(b), maxCompressedLen)
	}
	if len(b) < 8 || binary.BigEndian.Uint32(b)&^cookieWordSizeBits != v2CompressedCookie&^cookieWordSizeBits {
		return nil, errors.New("not an HdrHistogram V2 compressed encoding")
	}
	n := int(binary.BigEndian.Uint32(b[4:]))
	if n > len(b)-8 {
		return nil, errors.New("latency histogram is shorter than its header says")
	}
	z, err := zlib.NewReader(bytes.NewReader(b[8 : 8+n]))
	if err != nil {
		return nil, fmt.Errorf("latency histogram does not inflate: %w", err)
	}
	v2, err := io.ReadAll(io.LimitReader(z, maxInflatedLen+1))
	if err != nil {
		return nil, fmt.Errorf("latency histogram does not inflate: %w", err)
	}
	if len(v2) > maxInflatedLen {
		return nil, fmt.Errorf("latency histogram inflates beyond %d bytes", maxInflatedLen)
	}
	return v2, nil
}

// decodeLatenciesInto adds the latencies of a compressed V2 histogram (empty bytes are no
// latency) to h. The sender's layout may differ from h's (other significant figures, lowest
// value or range): each count lands on the lowest value of its bucket, clamped to
// maxLatencyUS. On error h may hold part of the counts.
func decodeLatenciesInto(h *hdrhistogram.Histogram, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	v2, err := inflateV2(b)
	if err != nil {
		return err
	}
	if len(v2) < v2HeaderLen || binary.BigEndian.Uint32(v2)&^cookieWordSizeBits != v2Cookie&^cookieWordSizeBits {
		return errors.New("latency histogram holds no V2 histogram")
	}
	if int(binary.BigEndian.Uint32(v2[4:])) != len(v2)-v2HeaderLen {
		return errors.New("latency histogram's payload length does not match its header")
	}
	if binary.BigEndian.Uint32(v2[8:]) != 0 {
		return errors.New("latency histogram has a normalizing index offset")
	}
	layout, err := newHdrLayout(binary.BigEndian.Uint32(v2[12:]), binary.BigEndian.Uint64(v2[16:]))
	if err != nil {
		return err
	}
	index := uint64(0)
	for at := v2HeaderLen; at < len(v2); {
		raw, took, ok := readVarint(v2[at:])
		if !ok {
			return errors.New("latency histogram: a count is cut short")
		}
		at += took
		n := unZigZag(raw)
		if n < 0 {
			index += uint64(-n)
			continue
		}
		if n > 0 {
			value, ok := layout.valueOf(index)
			if !ok {
				return errors.New("latency histogram: a count lies beyond 64-bit values")
			}
			if value > uint64(maxLatencyUS) {
				value = uint64(maxLatencyUS)
			}
			if err := h.RecordValues(int64(value), n); err != nil {
				return fmt.Errorf("latency histogram: %w", err)
			}
		}
		index++
	}
	return nil
}

// hdrLayout maps a counts index to the lowest value of its bucket, for a histogram of given
// significant figures and lowest discernible value (HdrHistogram's layout).
type hdrLayout struct {
	unitMagnitude uint
	halfMagnitude uint
	halfCount     uint64
}

func newHdrLayout(figures uint32, lowest uint64) (hdrLayout, error) {
	if figures < 1 || figures > 5 || lowest == 0 {
		return hdrLayout{}, fmt.Errorf("latency histogram: %d significant figures, lowest value %d", figures, lowest)
	}
	largest := 2 * uint64(math.Pow10(int(figures)))
	countMagnitude := uint(bits.Len64(largest - 1))
	return hdrLayout{
		unitMagnitude: uint(bits.Len64(lowest) - 1),
		halfMagnitude: countMagnitude - 1,
		halfCount:     1 << (countMagnitude - 1),
	}, nil
}

func (l hdrLayout) valueOf(index uint64) (uint64, bool) {
	bucket := index >> l.halfMagnitude
	sub := index&(l.halfCount-1) + l.halfCount
	if bucket == 0 {
		sub -= l.halfCount
	} else {
		bucket--
	}
	shift := bucket + uint64(l.unitMagnitude)
	if shift >= 64 || bits.LeadingZeros64(sub) < int(shift) {
		return 0, false
	}
	return sub << shift, true
}

// mergeLatencies is the compressed V2 encoding of the latencies of a and b together.
func mergeLatencies(a, b []byte) ([]byte, error) {
	if len(b) == 0 {
		return a, nil
	}
	if len(a) == 0 {
		return b, nil
	}
	h := newLatencyHistogram()
	if err := decodeLatenciesInto(h, a); err != nil {
		return nil, err
	}
	if err := decodeLatenciesInto(h, b); err != nil {
		return nil, err
	}
	return encodeLatencies(h), nil
}
