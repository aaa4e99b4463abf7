package sniff

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"
)

func TestWriterReaderRoundTrip(t *testing.T) {
	base := time.Date(2025, 11, 30, 4, 58, 0, 123456789, time.UTC)
	pkts := []struct {
		ts   time.Time
		data []byte
	}{
		{base, []byte{0x45, 1, 2, 3}},
		{base.Add(1500 * time.Microsecond), bytes.Repeat([]byte{0xab}, 4170)},
		{base.Add(time.Hour), nil},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if err := w.WritePacket(p.ts, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if want := fileHeaderLen + 3*recordHeaderLen + 4 + 4170; buf.Len() != want {
		t.Fatalf("file is %d bytes, want %d", buf.Len(), want)
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != LinkTypeRaw {
		t.Errorf("LinkType() = %d, want %d", r.LinkType(), LinkTypeRaw)
	}
	for i, p := range pkts {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if want := p.ts.Truncate(time.Microsecond); !got.Timestamp.Equal(want) {
			t.Errorf("packet %d: timestamp %v, want %v", i, got.Timestamp, want)
		}
		if got.LinkType != LinkTypeRaw || !bytes.Equal(got.Data, p.data) || got.OrigLen != len(p.data) {
			t.Errorf("packet %d: got linktype %d, %d bytes (orig %d), want %d, %d bytes",
				i, got.LinkType, len(got.Data), got.OrigLen, LinkTypeRaw, len(p.data))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last packet: err = %v, want io.EOF", err)
	}
}

func TestWriterTruncatesToSnaplen(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkTypeRaw)
	if err := w.WritePacket(time.Unix(1, 0), make([]byte, Snaplen+10)); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Data) != Snaplen || p.OrigLen != Snaplen+10 {
		t.Errorf("got %d bytes of %d, want %d of %d", len(p.Data), p.OrigLen, Snaplen, Snaplen+10)
	}
}

// buildFile builds a pcap file by hand in the given byte order and
// timestamp resolution.
func buildFile(order binary.AppendByteOrder, magic uint32, linktype uint32, recs ...[]byte) []byte {
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, linktype)
	for i, rec := range recs {
		b = order.AppendUint32(b, 1700000000+uint32(i))
		b = order.AppendUint32(b, 999999) // µs or ns, depending on magic
		b = order.AppendUint32(b, uint32(len(rec)))
		b = order.AppendUint32(b, uint32(len(rec)))
		b = append(b, rec...)
	}
	return b
}

func TestReaderVariants(t *testing.T) {
	tests := []struct {
		name  string
		order binary.AppendByteOrder
		magic uint32
		frac  time.Duration
	}{
		{"little-endian micro", binary.LittleEndian, magicMicro, 999999 * time.Microsecond},
		{"big-endian micro", binary.BigEndian, magicMicro, 999999 * time.Microsecond},
		{"little-endian nano", binary.LittleEndian, magicNano, 999999 * time.Nanosecond},
		{"big-endian nano", binary.BigEndian, magicNano, 999999 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := buildFile(tt.order, tt.magic, LinkTypeEthernet, []byte("one"), []byte("second"))
			r, err := NewReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"one", "second"} {
				p, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				wantTS := time.Unix(1700000000+int64(i), 0).Add(tt.frac)
				if string(p.Data) != want || !p.Timestamp.Equal(wantTS) || p.LinkType != LinkTypeEthernet {
					t.Errorf("packet %d = %q at %v linktype %d, want %q at %v linktype 1",
						i, p.Data, p.Timestamp, p.LinkType, want, wantTS)
				}
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("err = %v, want io.EOF", err)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	good := buildFile(binary.LittleEndian, magicMicro, LinkTypeRaw, []byte("0123456789"))
	hugeRecord := buildFile(binary.LittleEndian, magicMicro, LinkTypeRaw)
	hugeRecord = binary.LittleEndian.AppendUint32(hugeRecord, 0)
	hugeRecord = binary.LittleEndian.AppendUint32(hugeRecord, 0)
	hugeRecord = binary.LittleEndian.AppendUint32(hugeRecord, 1<<30)
	hugeRecord = binary.LittleEndian.AppendUint32(hugeRecord, 1<<30)
	badVersion := bytes.Clone(good)
	badVersion[4] = 3

	tests := []struct {
		name       string
		file       []byte
		headerErr  bool // NewReader fails
		unexpected bool // error wraps io.ErrUnexpectedEOF
	}{
		{"empty", nil, true, true},
		{"short header", good[:fileHeaderLen-1], true, true},
		{"bad magic", append([]byte{1, 2, 3, 4}, good[4:]...), true, false},
		{"pcapng", append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, good[4:]...), true, false},
		{"bad version", badVersion, true, false},
		{"short record header", good[:fileHeaderLen+5], false, true},
		{"short record data", good[:len(good)-1], false, true},
		{"huge record", hugeRecord, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(tt.file))
			if !tt.headerErr {
				if err != nil {
					t.Fatalf("NewReader: %v", err)
				}
				_, err = r.Next()
			}
			if err == nil || !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want one wrapping ErrFormat", err)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tt.unexpected {
				t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = %v, want %v", err, got, tt.unexpected)
			}
		})
	}
}

func TestNoAllocs(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.2:49152")
	dst := netip.MustParseAddrPort("198.18.0.3:4791")
	src6 := netip.MustParseAddrPort("[fd00::2]:49152")
	dst6 := netip.MustParseAddrPort("[fd00::3]:4791")
	payload := make([]byte, 4096)
	ts := time.Unix(1700000000, 0)

	w, err := NewWriter(io.Discard, LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecorder(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 0, 8192)
	for _, tt := range []struct {
		name string
		f    func()
	}{
		{"Writer.WritePacket", func() { _ = w.WritePacket(ts, payload) }},
		{"AppendUDPFrame/IPv4", func() { frame = AppendUDPFrame(frame[:0], src, dst, 7, payload) }},
		{"AppendUDPFrame/IPv6", func() { frame = AppendUDPFrame(frame[:0], src6, dst6, 0, payload) }},
		{"Recorder.Record", func() { _ = rec.Record(ts, src, dst, 7, payload) }},
		{"DecodeUDP", func() { DecodeUDP(LinkTypeRaw, frame) }},
	} {
		tt.f() // warm up buffers
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tt.name, n)
		}
	}
}
