package wire_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

func TestPSNAdd(t *testing.T) {
	for _, c := range []struct {
		p    wire.PSN
		n    int
		want wire.PSN
	}{
		{0, 0, 0},
		{0, 1, 1},
		{0xFFFFFF, 1, 0},
		{0xFFFFFF, 2, 1},
		{0, -1, 0xFFFFFF},
		{5, -6, 0xFFFFFF},
		{5, -5, 0},
		{0x123456, 1 << 24, 0x123456},
		{0x123456, -(1 << 24), 0x123456},
		{0x123456, 3 << 24, 0x123456},
		{0, -(1 << 24) - 1, 0xFFFFFF},
		{0x7FFFFF, 1, 0x800000},
		{0x800000, 0x800000, 0},
		{0xFFFFFE, 1<<28 + 3, 1},
	} {
		if got := c.p.Add(c.n); got != c.want {
			t.Errorf("%v.Add(%d) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
	if got := wire.PSN(0xFFFFFF).Next(); got != 0 {
		t.Errorf("0xffffff.Next() = %v", got)
	}
	if got := wire.PSN(0x7FFFFF).Next(); got != 0x800000 {
		t.Errorf("0x7fffff.Next() = %v", got)
	}
}

func TestPSNDiffLess(t *testing.T) {
	const half = 1 << 23
	for _, c := range []struct {
		p, q wire.PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xFFFFFF, 1}, // 0 comes right after 0xffffff
		{0xFFFFFF, 0, -1},
		{half - 1, 0, half - 1}, // the furthest "after"
		{half, 0, -half},        // exactly half a window counts as before
		{0, half, -half},
		{half + 1, 0, -(half - 1)},
		{0x000010, 0xFFFFF0, 0x20},
		{0xFFFFF0, 0x000010, -0x20},
	} {
		if got := c.p.Diff(c.q); got != c.diff {
			t.Errorf("%v.Diff(%v) = %d, want %d", c.p, c.q, got, c.diff)
		}
		if got, want := c.p.Less(c.q), c.diff < 0; got != want {
			t.Errorf("%v.Less(%v) = %v, want %v", c.p, c.q, got, want)
		}
	}
	// Bits above 24 do not take part.
	if got := wire.PSN(0xFF000001).Diff(0x01000000); got != 1 {
		t.Errorf("Diff ignores high bits: got %d", got)
	}
	// Add and Diff are inverse within the half window; Less is a strict
	// order there.
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		p := wire.PSN(r.Uint32N(1 << 24))
		n := int(r.Int32N(1<<24)) - half // -2^23 .. 2^23-1
		q := p.Add(n)
		if !q.Valid() {
			t.Fatalf("%v.Add(%d) = %v is not 24-bit", p, n, q)
		}
		if got := q.Diff(p); got != int32(n) {
			t.Fatalf("%v.Add(%d).Diff = %d", p, n, got)
		}
		if n != -half {
			if got := p.Diff(q); got != int32(-n) {
				t.Fatalf("%v.Diff(%v.Add(%d)) = %d", p, p, n, got)
			}
		}
		if n > 0 && (!p.Less(q) || q.Less(p)) {
			t.Fatalf("%v vs %v (+%d): Less wrong", p, q, n)
		}
		if n == 0 && (p.Less(q) || q.Less(p)) {
			t.Fatalf("%v.Less(itself)", p)
		}
	}
}

func TestPSNQPNText(t *testing.T) {
	if got := wire.PSN(0xABCDEF).String(); got != "0xabcdef" {
		t.Errorf("PSN String = %q", got)
	}
	if got := string(wire.PSN(0x10).AppendTo([]byte("psn="))); got != "psn=0x10" {
		t.Errorf("PSN AppendTo = %q", got)
	}
	if got := wire.QPN(0x11).String(); got != "0x11" {
		t.Errorf("QPN String = %q", got)
	}
	if got := string(wire.QPN(1).AppendTo(nil)); got != "0x1" {
		t.Errorf("QPN AppendTo = %q", got)
	}
	if got := wire.RKey(0x286).String(); got != "0x00000286" {
		t.Errorf("RKey String = %q", got)
	}
	if got := wire.LKey(0xFFFFFFFF).String(); got != "0xffffffff" {
		t.Errorf("LKey String = %q", got)
	}
	for _, c := range []struct {
		p  wire.PSN
		ok bool
	}{{0, true}, {0xFFFFFF, true}, {0x1000000, false}, {0xFFFFFFFF, false}} {
		if c.p.Valid() != c.ok {
			t.Errorf("PSN(%#x).Valid() = %v", uint32(c.p), !c.ok)
		}
	}
	for _, c := range []struct {
		q  wire.QPN
		ok bool
	}{{0, false}, {1, true}, {0xFFFFFF, true}, {0x1000000, false}, {0x1000001, false}} {
		if c.q.Valid() != c.ok {
			t.Errorf("QPN(%#x).Valid() = %v", uint32(c.q), !c.ok)
		}
	}
	if wire.QPNGSI != 1 || wire.QKeyGSI != 0x80010000 || wire.PKeyDefault != 0xFFFF {
		t.Error("GSI constants")
	}
}

func TestGID(t *testing.T) {
	for _, c := range []struct {
		addr   string
		gid    string // 32 hex digits
		str    string
		mapped bool
	}{
		{"198.18.0.2", "00000000000000000000ffffc6120002", "::ffff:198.18.0.2", true},
		{"0.0.0.0", "00000000000000000000ffff00000000", "::ffff:0.0.0.0", true},
		{"255.255.255.255", "00000000000000000000ffffffffffff", "::ffff:255.255.255.255", true},
		{"::ffff:10.0.0.1", "00000000000000000000ffff0a000001", "::ffff:10.0.0.1", true},
		{"fd00::a", "fd00000000000000000000000000000a", "fd00::a", false},
		{"fe80::5054:ff:fe12:2", "fe80000000000000505400fffe120002", "fe80::5054:ff:fe12:2", false},
		{"fe80::1%eth0", "fe800000000000000000000000000001", "fe80::1", false},
		{"::1", "00000000000000000000000000000001", "::1", false},
	} {
		t.Run(c.addr, func(t *testing.T) {
			a := netip.MustParseAddr(c.addr)
			g := wire.GIDFromAddr(a)
			if got := fmt.Sprintf("%x", g[:]); got != c.gid {
				t.Errorf("GID bytes %s, want %s", got, c.gid)
			}
			if g.String() != c.str || string(g.AppendTo([]byte("x"))) != "x"+c.str {
				t.Errorf("String %q AppendTo %q, want %q", g.String(), g.AppendTo(nil), c.str)
			}
			if g.IsV4Mapped() != c.mapped {
				t.Errorf("IsV4Mapped = %v", g.IsV4Mapped())
			}
			if g.IsZero() {
				t.Error("IsZero")
			}
			back := g.Addr()
			want := a.WithZone("").Unmap()
			if back != want {
				t.Errorf("Addr() = %v, want %v", back, want)
			}
			if c.mapped != back.Is4() {
				t.Errorf("Addr().Is4() = %v", back.Is4())
			}
			if wire.GIDFromAddr(back) != g {
				t.Error("GIDFromAddr(g.Addr()) != g")
			}
		})
	}
	var zero wire.GID
	if !zero.IsZero() || zero.IsV4Mapped() {
		t.Error("zero GID")
	}
	if wire.GIDFromAddr(netip.Addr{}) != zero {
		t.Error("GIDFromAddr(invalid) is not the zero GID")
	}
}

func TestSyndrome(t *testing.T) {
	for b := range 256 {
		s := wire.Syndrome(b)
		typ := wire.SyndromeType(b >> 5 & 3)
		if s.Type() != typ || s.Value() != uint8(b&0x1F) {
			t.Errorf("%#02x: Type %d Value %d", b, s.Type(), s.Value())
		}
		if s.IsACK() != (typ == wire.SynACK) || s.IsRNR() != (typ == wire.SynRNR) || s.IsNAK() != (typ == wire.SynNAK) {
			t.Errorf("%#02x: IsACK %v IsRNR %v IsNAK %v", b, s.IsACK(), s.IsRNR(), s.IsNAK())
		}
		if s.String() == "" {
			t.Errorf("%#02x: empty String", b)
		}
	}
	for _, c := range []struct {
		s    wire.Syndrome
		b    uint8
		typ  wire.SyndromeType
		str  string
		code wire.NAKCode
	}{
		{wire.SyndromeACK, 0x1F, wire.SynACK, "ACK(credits=31)", 0},
		{wire.SyndromeRNR(0), 0x20, wire.SynRNR, "RNR_NAK(timer=0)", 0},
		{wire.SyndromeRNR(31), 0x3F, wire.SynRNR, "RNR_NAK(timer=31)", 0},
		{wire.SyndromeRNR(32 + 14), 0x2E, wire.SynRNR, "RNR_NAK(timer=14)", 0},
		{wire.SyndromePSNSeqError, 0x60, wire.SynNAK, "NAK(PSN sequence error)", wire.NAKPSNSeqError},
		{wire.SyndromeInvalidReq, 0x61, wire.SynNAK, "NAK(invalid request)", wire.NAKInvalidReq},
		{wire.SyndromeRemoteAccess, 0x62, wire.SynNAK, "NAK(remote access error)", wire.NAKRemoteAccess},
		{wire.SyndromeRemoteOp, 0x63, wire.SynNAK, "NAK(remote operational error)", wire.NAKRemoteOp},
		{0x64, 0x64, wire.SynNAK, "NAK(invalid RD request)", wire.NAKInvalidRDReq},
		{0x65, 0x65, wire.SynNAK, "NAK(5)", 5},
		{0x40, 0x40, wire.SynReserved, "syndrome(0x40)", 0},
	} {
		if uint8(c.s) != c.b || c.s.Type() != c.typ || c.s.String() != c.str {
			t.Errorf("%#02x: byte %#02x type %d String %q, want %#02x %d %q", uint8(c.s), uint8(c.s), c.s.Type(), c.s.String(), c.b, c.typ, c.str)
		}
		if c.typ == wire.SynNAK && c.s.NAK() != c.code {
			t.Errorf("%#02x: NAK() = %d, want %d", c.b, c.s.NAK(), c.code)
		}
	}
}

// RNR timer codes as listed in roce-wire.md §2.5, in milliseconds.
var rnrMs = [32]float64{
	655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12,
	0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
	2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
	40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
}

func TestRNRTimer(t *testing.T) {
	for code, ms := range rnrMs {
		want := int64(ms*1e6 + 0.5)
		if got := wire.RNRTimer(uint8(code)); got != want {
			t.Errorf("RNRTimer(%d) = %d ns, want %d", code, got, want)
		}
		if wire.RNRTimer(uint8(code+32)) != wire.RNRTimer(uint8(code)) || wire.RNRTimer(uint8(code+224)) != wire.RNRTimer(uint8(code)) {
			t.Errorf("RNRTimer(%d) does not mask to 5 bits", code)
		}
	}
}

func TestReasons(t *testing.T) {
	names := map[wire.Reason]string{}
	for r := range wire.Reason(wire.NumReasons) {
		s := r.String()
		if s == "" || names[r] != "" {
			t.Errorf("reason %d: %q", r, s)
		}
		for o, n := range names {
			if n == s {
				t.Errorf("reasons %d and %d share the name %q", o, r, s)
			}
		}
		names[r] = s
	}
	if got := wire.Reason(200).String(); got != "reason(200)" {
		t.Errorf("unknown reason String = %q", got)
	}
	if wire.ReasonOf(nil) != wire.ReasonNone || wire.ReasonOf(io.EOF) != wire.ReasonNone {
		t.Error("ReasonOf of a foreign error")
	}
	// Reasons survive wrapping; only short errors match ErrShortPacket.
	var p wire.Packet
	errTVer := p.Parse([]byte{0x04, 0x01, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0})
	wrapped := fmt.Errorf("qp 0x11: %w", errTVer)
	if wire.ReasonOf(wrapped) != wire.ReasonTVer {
		t.Errorf("ReasonOf(wrapped) = %v", wire.ReasonOf(wrapped))
	}
	if errors.Is(wrapped, wire.ErrShortPacket) || errors.Is(wrapped, io.ErrUnexpectedEOF) {
		t.Error("a tver error matches ErrShortPacket")
	}
	errShort := p.Parse(nil)
	if !errors.Is(fmt.Errorf("x: %w", errShort), wire.ErrShortPacket) || !errors.Is(errShort, io.ErrUnexpectedEOF) {
		t.Error("wrapped short error does not match")
	}
	if !errors.Is(wire.ErrShortPacket, io.ErrUnexpectedEOF) {
		t.Error("ErrShortPacket does not wrap io.ErrUnexpectedEOF")
	}
	var pe *wire.ParseError
	if !errors.As(errShort, &pe) || pe.Reason != wire.ReasonShort || pe.Error() == "" {
		t.Errorf("short error is not a *ParseError: %v", errShort)
	}
}
