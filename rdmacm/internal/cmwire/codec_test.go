package cmwire_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// encoder is what every Fields struct implements.
type encoder interface {
	comparable
	Len() int
	Append([]byte) []byte
}

// triad runs the STYLE §2 item 8 checks for one codec: Fields → Append →
// Parse → Fields round trip; Len() == len(Append(nil)) == size; Append
// appends; Parse consumes exactly size bytes of a longer buffer and
// aliases it; every truncated prefix fails with a short error, a nil view
// and n == 0.
func triad[F encoder, H ~[]byte](t *testing.T, size int, cases map[string]F,
	parse func([]byte) (H, int, error), fields func(H) F, valid func(H) bool) {
	t.Helper()
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if got := f.Len(); got != size {
				t.Errorf("Len() = %d, want %d", got, size)
			}
			enc := f.Append(nil)
			if len(enc) != size {
				t.Fatalf("len(Append(nil)) = %d, want %d", len(enc), size)
			}
			prefix := []byte("prefix")
			if got := f.Append(bytes.Clone(prefix)); !bytes.Equal(got, append(bytes.Clone(prefix), enc...)) {
				t.Errorf("Append(prefix) does not keep the prefix")
			}
			buf := append(bytes.Clone(enc), 0xEE, 0xEE, 0xEE)
			h, n, err := parse(buf)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if n != size || len(h) != size {
				t.Errorf("parse consumed %d bytes, view %d, want %d", n, len(h), size)
			}
			if &h[0] != &buf[0] {
				t.Errorf("view does not alias the input")
			}
			if !valid(h) {
				t.Errorf("IsValid() = false")
			}
			if got := fields(h); got != f {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, f)
			}
			for i := range size {
				h, n, err := parse(enc[:i:i])
				checkShort(t, fmt.Sprintf("prefix %d", i), err)
				if h != nil || n != 0 {
					t.Errorf("prefix %d: view %x, n %d with an error", i, h, n)
				}
			}
		})
	}
}

func checkShort(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case !errors.Is(err, wire.ErrShortPacket):
		t.Errorf("%s: %v does not match wire.ErrShortPacket", what, err)
	case !errors.Is(err, io.ErrUnexpectedEOF):
		t.Errorf("%s: %v does not match io.ErrUnexpectedEOF", what, err)
	case cmwire.ReasonOf(err) != cmwire.ReasonShort:
		t.Errorf("%s: reason %v, want short", what, cmwire.ReasonOf(err))
	}
}

// pat returns n bytes counting from seed.
func pat(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

var (
	gidA = wire.GIDFromAddr(netip.MustParseAddr("198.18.0.2"))
	gidB = wire.GIDFromAddr(netip.MustParseAddr("2001:db8::1"))
)

func maxPath() cmwire.PathFields {
	return cmwire.PathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: wire.GID(pat(1, 16)), RemoteGID: wire.GID(pat(0x80, 16)),
		FlowLabel: 0xFFFFF, Reserved6: 0x3F, PacketRate: 0x3F, TrafficClass: 0xFF, HopLimit: 0xFF, SL: 15,
		SubnetLocal: true, ReservedSL: 7, LocalACKTimeout: 31, ReservedACK: 7}
}

func TestPathTriad(t *testing.T) {
	triad(t, cmwire.PathSize, map[string]cmwire.PathFields{
		"zero": {},
		"max":  maxPath(),
		"rxe": {LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gidA, RemoteGID: gidB, FlowLabel: 0x9875C,
			HopLimit: 64, LocalACKTimeout: 19},
		"bits alone": {SubnetLocal: true, PacketRate: 1, Reserved6: 1, FlowLabel: 1},
	}, cmwire.ParsePath, cmwire.Path.Fields, cmwire.Path.IsValid)
}

func TestREQTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.REQFields{
		"zero": {},
		"max": {LocalCommID: 0xFFFFFFFF, Reserved4: 0xFF, VendorID: 0xFFFFFF, ServiceID: ^uint64(0), LocalCAGUID: ^uint64(0),
			Reserved24: 0xFFFFFFFF, LocalQKey: 0xFFFFFFFF, LocalQPN: 0xFFFFFF, ResponderResources: 0xFF, LocalEECN: 0xFFFFFF,
			InitiatorDepth: 0xFF, RemoteEECN: 0xFFFFFF, RemoteCMResponseTimeout: 31, TransportType: 3, EndToEndFlowControl: true,
			StartingPSN: 0xFFFFFF, LocalCMResponseTimeout: 31, RetryCount: 7, PKey: 0xFFFF, PathMTU: 15, RDCExists: true,
			RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 7, Primary: maxPath(), Alternate: maxPath(),
			PrivateData: [cmwire.REQPrivateDataSize]byte(pat(7, cmwire.REQPrivateDataSize))},
		"rdma_cm": {LocalCommID: 0x11223344, ServiceID: cmwire.ServiceID(cmwire.PSTCP, 18515), LocalCAGUID: 0x0200000000000001,
			LocalQPN: 0x123, ResponderResources: 16, InitiatorDepth: 16, RemoteCMResponseTimeout: 20, StartingPSN: 0xABCDEF,
			LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xFFFF, PathMTU: cmwire.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
			Primary: cmwire.PathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gidA, RemoteGID: gidB, FlowLabel: 0x12345,
				HopLimit: 64, LocalACKTimeout: 19}},
		"bits alone": {EndToEndFlowControl: true, RDCExists: true, SRQ: true, TransportType: cmwire.TransportXRC, ExtendedTransportType: 1},
	}, cmwire.ParseREQ, cmwire.REQ.Fields, cmwire.REQ.IsValid)
}

func TestREPTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.REPFields{
		"zero": {},
		"max": {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, LocalQKey: 0xFFFFFFFF, LocalQPN: 0xFFFFFF, LocalEECN: 0xFFFFFF,
			StartingPSN: 0xFFFFFF, VendorID: 0xFFFFFF, ResponderResources: 0xFF, InitiatorDepth: 0xFF, TargetACKDelay: 31,
			FailoverAccepted: 3, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, Reserved27: 15, LocalCAGUID: ^uint64(0),
			PrivateData: [cmwire.REPPrivateDataSize]byte(pat(3, cmwire.REPPrivateDataSize))},
		"vendor id": {VendorID: 0x123456, LocalQPN: 0xABCDEF, LocalEECN: 0x010203, StartingPSN: 0x040506},
		"rxe":       {LocalCommID: 0xa9b5c8e4, RemoteCommID: 0x6071f97b, LocalQPN: 0x11, StartingPSN: 0x188d2e, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: 0x505400fffe120003},
	}, cmwire.ParseREP, cmwire.REP.Fields, cmwire.REP.IsValid)
}

func TestRTUTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.RTUFields{
		"zero": {},
		"max":  {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, PrivateData: [cmwire.RTUPrivateDataSize]byte(pat(9, cmwire.RTUPrivateDataSize))},
	}, cmwire.ParseRTU, cmwire.RTU.Fields, cmwire.RTU.IsValid)
}

func TestDREQTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.DREQFields{
		"zero": {},
		"max": {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, RemoteQPN: 0xFFFFFF, Reserved11: 0xFF,
			PrivateData: [cmwire.DREQPrivateDataSize]byte(pat(1, cmwire.DREQPrivateDataSize))},
		"rxe": {LocalCommID: 0x6071f97b, RemoteCommID: 0xa9b5c8e4, RemoteQPN: 0x11},
	}, cmwire.ParseDREQ, cmwire.DREQ.Fields, cmwire.DREQ.IsValid)
}

func TestDREPTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.DREPFields{
		"zero": {},
		"max":  {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, PrivateData: [cmwire.DREPPrivateDataSize]byte(pat(2, cmwire.DREPPrivateDataSize))},
	}, cmwire.ParseDREP, cmwire.DREP.Fields, cmwire.DREP.IsValid)
}

func TestMRATriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.MRAFields{
		"zero": {},
		"max": {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, MessageMRAed: 3, Reserved8: 0x3F, ServiceTimeout: 31,
			Reserved9: 7, PrivateData: [cmwire.MRAPrivateDataSize]byte(pat(4, cmwire.MRAPrivateDataSize))},
		"cma": {LocalCommID: 1, RemoteCommID: 2, MessageMRAed: cmwire.KindREQ, ServiceTimeout: 24},
		"lap": {MessageMRAed: cmwire.KindOther},
	}, cmwire.ParseMRA, cmwire.MRA.Fields, cmwire.MRA.IsValid)
}

func TestREJTriad(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.REJFields{
		"zero": {},
		"max": {LocalCommID: 0xFFFFFFFF, RemoteCommID: 0xFFFFFFFF, MessageRejected: 3, Reserved8: 0x3F, RejectInfoLength: 0x7F,
			Reserved9: 1, Reason: 0xFFFF, ARI: [cmwire.REJARISize]byte(pat(5, cmwire.REJARISize)), PrivateData: [cmwire.REJPrivateDataSize]byte(pat(6, cmwire.REJPrivateDataSize))},
		"no listener": {RemoteCommID: 0x6071f97b, MessageRejected: cmwire.KindREQ, Reason: cmwire.RejInvalidServiceID},
		"timeout":     {LocalCommID: 1, RemoteCommID: 2, RejectInfoLength: 8, Reason: cmwire.RejTimeout, ARI: [72]byte{0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0, 2}},
	}, cmwire.ParseREJ, cmwire.REJ.Fields, cmwire.REJ.IsValid)
}

func TestSIDRTriads(t *testing.T) {
	triad(t, cmwire.BodySize, map[string]cmwire.SIDRREQFields{
		"zero": {},
		"max": {RequestID: 0xFFFFFFFF, PKey: 0xFFFF, Reserved6: 0xFFFF, ServiceID: ^uint64(0),
			PrivateData: [cmwire.SIDRREQPrivateDataSize]byte(pat(8, cmwire.SIDRREQPrivateDataSize))},
		"udp": {RequestID: 7, PKey: 0xFFFF, ServiceID: cmwire.ServiceID(cmwire.PSUDP, 4000)},
	}, cmwire.ParseSIDRREQ, cmwire.SIDRREQ.Fields, cmwire.SIDRREQ.IsValid)
	triad(t, cmwire.BodySize, map[string]cmwire.SIDRREPFields{
		"zero": {},
		"max": {RequestID: 0xFFFFFFFF, Status: 0xFF, AdditionalInfoLength: 0xFF, VendorID: 0xFFFFFF, QPN: 0xFFFFFF,
			ServiceID: ^uint64(0), QKey: 0xFFFFFFFF, ClassPortInfo: [cmwire.SIDRREPInfoSize]byte(pat(1, cmwire.SIDRREPInfoSize)),
			PrivateData: [cmwire.SIDRREPPrivateDataSize]byte(pat(2, cmwire.SIDRREPPrivateDataSize))},
		"vendor": {VendorID: 0x123456, QPN: 0xABCDEF},
		"udp":    {RequestID: 7, Status: cmwire.SIDRSuccess, QPN: 0x13, ServiceID: cmwire.ServiceID(cmwire.PSUDP, 4000), QKey: cmwire.RDMAUDPQKey},
	}, cmwire.ParseSIDRREP, cmwire.SIDRREP.Fields, cmwire.SIDRREP.IsValid)
}

func TestCMAHeaderTriad(t *testing.T) {
	v4 := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	triad(t, cmwire.CMAHeaderSize, map[string]cmwire.CMAHeaderFields{
		"ipv4":      cmwire.NewCMAHeader(0xd1ea, v4("198.18.0.2"), v4("198.18.0.3")),
		"ipv4 max":  {IPVersion: 4, Port: 0xFFFF, Src: v4("255.255.255.255"), Dst: v4("255.255.255.255")},
		"ipv6":      cmwire.NewCMAHeader(50000, v4("2001:db8::1"), v4("fe80::5054:ff:fe12:2")),
		"ipv6 zero": {IPVersion: 6, Src: netip.IPv6Unspecified(), Dst: netip.IPv6Unspecified()},
		"ipv4 zero": {IPVersion: 4, Src: netip.IPv4Unspecified(), Dst: netip.IPv4Unspecified()},
	}, cmwire.ParseCMAHeader, cmwire.CMAHeader.Fields, cmwire.CMAHeader.IsValid)
}

func TestCMAHeaderErrors(t *testing.T) {
	good := cmwire.NewCMAHeader(1, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")).Append(nil)
	for _, c := range []struct {
		name string
		off  int
		val  byte
		want cmwire.Reason
	}{
		{"version 1", 0, 1, cmwire.ReasonCMAVersion},
		{"minor version", 0, 0x01, cmwire.ReasonCMAVersion},
		{"ip version 5", 1, 0x50, cmwire.ReasonCMAIPVersion},
		{"reserved nibble", 1, 0x41, cmwire.ReasonCMAIPVersion},
		{"src padding", 4, 1, cmwire.ReasonCMAAddress},
		{"dst padding", 31, 0xFF, cmwire.ReasonCMAAddress},
	} {
		b := bytes.Clone(good)
		b[c.off] = c.val
		h, n, err := cmwire.ParseCMAHeader(b)
		if cmwire.ReasonOf(err) != c.want || h != nil || n != 0 || errors.Is(err, wire.ErrShortPacket) {
			t.Errorf("%s: %v (reason %v), want %v", c.name, err, cmwire.ReasonOf(err), c.want)
		}
	}
	// IPv4-mapped input is written in the IPv4 form.
	m := cmwire.CMAHeaderFields{IPVersion: 4, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.2")}
	if !bytes.Equal(m.Append(nil)[4:], good[4:]) {
		t.Errorf("IPv4-mapped addresses encode as % x", m.Append(nil))
	}
}

func TestMessageTriad(t *testing.T) {
	req := cmwire.REQFields{LocalCommID: 0x11223344, LocalQPN: 0x123, StartingPSN: 0xABCDEF, PKey: 0xFFFF}
	triad(t, wire.MADSize, map[string]cmwire.MessageFields{
		"req":  {Header: cmwire.Header(0x100000001, cmwire.AttrREQ), Body: req},
		"rej":  {Header: cmwire.Header(1, cmwire.AttrREJ), Body: cmwire.REJFields{Reason: cmwire.RejConsumerDefined}},
		"rep":  {Header: cmwire.Header(2, cmwire.AttrREP), Body: cmwire.REPFields{LocalQPN: 5}},
		"rtu":  {Header: cmwire.Header(3, cmwire.AttrRTU), Body: cmwire.RTUFields{LocalCommID: 1}},
		"mra":  {Header: cmwire.Header(4, cmwire.AttrMRA), Body: cmwire.MRAFields{ServiceTimeout: 24}},
		"dreq": {Header: cmwire.Header(5, cmwire.AttrDREQ), Body: cmwire.DREQFields{RemoteQPN: 0x11}},
		"drep": {Header: cmwire.Header(6, cmwire.AttrDREP), Body: cmwire.DREPFields{RemoteCommID: 9}},
		"sidr": {Header: cmwire.Header(7, cmwire.AttrSIDRREQ), Body: cmwire.SIDRREQFields{PKey: 0xFFFF}},
		"sidr rep": {Header: wire.MADFields{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, Status: 0xFFFF,
			ClassSpecific: 0xFFFF, TransactionID: ^uint64(0), AttributeID: 0x18, Reserved: 0xFFFF, AttributeModifier: 0xFFFFFFFF},
			Body: cmwire.SIDRREPFields{QKey: cmwire.RDMAUDPQKey}},
	}, cmwire.ParseMessage, cmwire.Message.Fields, cmwire.Message.IsValid)
}

func TestMessageErrors(t *testing.T) {
	good := cmwire.AppendMAD(nil, 1, cmwire.RTUFields{})
	for _, c := range []struct {
		name string
		off  int
		val  byte
		want cmwire.Reason
	}{
		{"base version", 0, 2, cmwire.ReasonBaseVersion},
		{"class SA", 1, 0x03, cmwire.ReasonClass},
		{"class version 1", 2, 1, cmwire.ReasonClassVersion},
		{"method get", 3, wire.MethodGet, cmwire.ReasonMethod},
		{"send with response bit", 3, 0x83, cmwire.ReasonMethod},
		{"class port info", 17, 0x01, cmwire.ReasonAttribute},
		{"LAP", 17, 0x19, cmwire.ReasonAttribute},
		{"APR", 17, 0x1A, cmwire.ReasonAttribute},
		{"attr 0x0110", 16, 0x01, cmwire.ReasonAttribute},
	} {
		b := bytes.Clone(good)
		b[c.off] = c.val
		m, n, err := cmwire.ParseMessage(b)
		if cmwire.ReasonOf(err) != c.want || m != nil || n != 0 {
			t.Errorf("%s: %v (reason %v), want %v", c.name, err, cmwire.ReasonOf(err), c.want)
		}
	}
	if r := cmwire.ReasonOf(io.EOF); r != cmwire.ReasonNone {
		t.Errorf("ReasonOf(io.EOF) = %v", r)
	}
	for r := range cmwire.NumReasons {
		if s := cmwire.Reason(r).String(); strings.HasPrefix(s, "reason(") {
			t.Errorf("Reason(%d) has no name", r)
		}
	}
	// A nil body writes zeros with the header's attribute.
	if b := (cmwire.MessageFields{Header: cmwire.Header(1, cmwire.AttrRTU)}).Append(nil); !bytes.Equal(b, good) {
		t.Errorf("nil body: %x", b)
	}
}

// TestNoAllocs: parsing and reading views never allocate; neither do the
// encoders when the buffer has room.
func TestNoAllocs(t *testing.T) {
	req := cmwire.REQFields{LocalQPN: 0x11}
	cmwire.NewCMAHeader(1, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")).Append(req.PrivateData[:0])
	mad := cmwire.AppendMAD(nil, 1, req)
	buf := make([]byte, 0, wire.MADSize)
	short := mad[:100]
	var sink uint64
	n := testing.AllocsPerRun(100, func() {
		m, _, err := cmwire.ParseMessage(mad)
		if err != nil {
			panic(err)
		}
		r := m.REQ()
		sink += uint64(r.LocalQPN()) + uint64(r.Primary().FlowLabel()) + r.ServiceID()
		h, _, err := cmwire.ParseCMAHeader(r.PrivateData())
		if err != nil {
			panic(err)
		}
		sink += uint64(h.Port()) + uint64(h.Src().BitLen())
		_, _, err = cmwire.ParseMessage(short)
		sink += uint64(cmwire.ReasonOf(err))
		buf = r.Fields().Append(buf[:0])
		buf = cmwire.NewCMAHeader(1, h.Src(), h.Dst()).Append(buf[:0])
	})
	if n != 0 {
		t.Errorf("%v allocations per run", n)
	}
	_ = sink
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   cmwire.PortSpace
		port uint16
		sid  uint64
	}{
		{cmwire.PSTCP, 18515, 0x0000000001064853},
		{cmwire.PSTCP, 7174, 0x0000000001061c06},
		{cmwire.PSUDP, 0, 0x0000000001110000},
		{cmwire.PSIB, 0xFFFF, 0x00000000013FFFFF},
		{cmwire.PSIPoIB, 1, 0x0000000000020001},
	} {
		if got := cmwire.ServiceID(c.ps, c.port); got != c.sid {
			t.Errorf("ServiceID(%v, %d) = %#x, want %#x", c.ps, c.port, got, c.sid)
		}
		ps, port, ok := cmwire.SplitServiceID(c.sid)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("SplitServiceID(%#x) = %v %d %v", c.sid, ps, port, ok)
		}
		if got, want := cmwire.IsCMAServiceID(c.sid), c.ps != cmwire.PSIPoIB; got != want {
			t.Errorf("IsCMAServiceID(%#x) = %v", c.sid, got)
		}
	}
	for _, sid := range []uint64{0, 0x1_0000_0106_0001, 0x0000000001070000, 0x0000000001000001} {
		if _, _, ok := cmwire.SplitServiceID(sid); ok {
			t.Errorf("SplitServiceID(%#x) ok", sid)
		}
	}
	if s := cmwire.PSTCP.String(); s != "TCP" {
		t.Errorf("PSTCP = %q", s)
	}
}

func TestTimeout(t *testing.T) {
	for _, c := range []struct {
		t     cmwire.Timeout
		d, kd time.Duration
	}{
		{0, 4096 * time.Nanosecond, time.Millisecond},
		{14, 67108864 * time.Nanosecond, 64 * time.Millisecond},
		{16, 268435456 * time.Nanosecond, 256 * time.Millisecond},
		{18, 1073741824 * time.Nanosecond, 1024 * time.Millisecond},
		{20, 4294967296 * time.Nanosecond, 4096 * time.Millisecond},
		{31, 4096 * time.Nanosecond << 31, time.Millisecond << 23},
	} {
		if got := c.t.Duration(); got != c.d {
			t.Errorf("%d.Duration() = %v, want %v", c.t, got, c.d)
		}
		if got := c.t.KernelDuration(); got != c.kd {
			t.Errorf("%d.KernelDuration() = %v, want %v", c.t, got, c.kd)
		}
		if got := cmwire.TimeoutFor(c.d); got != c.t {
			t.Errorf("TimeoutFor(%v) = %d, want %d", c.d, got, c.t)
		}
		if c.t > 0 {
			if got := cmwire.TimeoutFor(c.d - 1); got != c.t {
				t.Errorf("TimeoutFor(%v-1) = %d, want %d", c.d, got, c.t)
			}
		}
	}
	if got := cmwire.TimeoutFor(24 * time.Hour); got != cmwire.MaxTimeout {
		t.Errorf("TimeoutFor(24h) = %d", got)
	}
	for _, c := range []struct{ delay, plt, want cmwire.Timeout }{
		{15, 18, 19}, {15, 16, 17}, {15, 14, 16}, {15, 13, 16}, {15, 12, 15}, {0, 0, 2}, {31, 31, 31}, {20, 5, 20},
	} {
		if got := cmwire.AckTimeout(c.delay, c.plt); got != c.want {
			t.Errorf("AckTimeout(%d, %d) = %d, want %d", c.delay, c.plt, got, c.want)
		}
	}
}

func TestStrings(t *testing.T) {
	for r, want := range map[cmwire.RejectReason]string{
		0: "unrecognized reason", 1: "no QP", 4: "timeout", 8: "invalid service ID", 10: "stale conn",
		12: "invalid GID", 18: "invalid alt GID", 23: "invalid alt packet rate", 27: "insufficient resp resources",
		28: "consumer defined", 33: "invalid alt flow label", 34: "unrecognized reason",
		35: "vendor option is not supported", 36: "unrecognized reason", 0xFFFF: "unrecognized reason",
	} {
		if got := r.String(); got != want {
			t.Errorf("RejectReason(%d) = %q, want %q", r, got, want)
		}
	}
	for r := cmwire.RejNoQP; r <= cmwire.RejInvalidAltFlowLabel; r++ {
		if r.String() == "unrecognized reason" {
			t.Errorf("RejectReason(%d) has no name", r)
		}
	}
	for a, want := range map[cmwire.AttrID]string{cmwire.AttrREQ: "REQ", cmwire.AttrSIDRREP: "SIDR_REP",
		cmwire.AttrAPR: "APR", cmwire.AttrClassPortInfo: "ClassPortInfo", 0x99: "attr(0x99)"} {
		if got := a.String(); got != want {
			t.Errorf("AttrID(%#x) = %q, want %q", uint16(a), got, want)
		}
	}
	if got := cmwire.MTU4096.Bytes(); got != 4096 {
		t.Errorf("MTU4096 = %d", got)
	}
	if got := cmwire.MTUFromBytes(4500 - 48); got != cmwire.MTU4096 {
		t.Errorf("MTUFromBytes(4452) = %v", got)
	}
	if got := cmwire.MTUFromBytes(1500); got != cmwire.MTU1024 {
		t.Errorf("MTUFromBytes(1500) = %v", got)
	}
	if got := cmwire.MTUFromBytes(100); got != 0 || cmwire.MTU(0).Bytes() != 0 || cmwire.MTU(6).Bytes() != 0 {
		t.Errorf("MTUFromBytes(100) = %v", got)
	}
	if got := cmwire.KernelTID(2, 0x6071f97b); got != 0x000000027bf97160 {
		t.Errorf("KernelTID = %#x", got)
	}
	if got := cmwire.CommID(0x6071f97b).String(); got != "0x6071f97b" {
		t.Errorf("CommID = %q", got)
	}
}
