package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// encoder is what every Fields struct implements.
type encoder interface {
	comparable
	Len() int
	Append([]byte) []byte
}

// triad runs the STYLE §2 item 8 checks for one header type:
//
//   - Fields → Append → Parse → Fields gives back the same value;
//   - Len() == len(Append(nil)) == the size constant;
//   - Append appends (keeps what b already holds);
//   - Parse of a longer buffer consumes exactly size bytes, and the view
//     it returns aliases the input;
//   - every truncated prefix fails with an error matching both
//     wire.ErrShortPacket and io.ErrUnexpectedEOF, with Reason short,
//     and returns a nil view and n == 0.
//
// tail is appended after the encoded header before parsing (the MAD needs
// its 232 bytes of class data; the other headers get none).
func triad[F encoder, H ~[]byte](t *testing.T, size int, cases map[string]F,
	parse func([]byte) (H, int, error), fields func(H) F, valid func(H) bool, tail int) {
	t.Helper()
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if got := f.Len(); got != size {
				t.Errorf("Len() = %d, want %d", got, size)
			}
			enc := f.Append(nil)
			if len(enc) != f.Len() {
				t.Fatalf("len(Append(nil)) = %d, Len() = %d", len(enc), f.Len())
			}
			prefix := []byte("prefix")
			if got := f.Append(bytes.Clone(prefix)); !bytes.Equal(got, append(bytes.Clone(prefix), enc...)) {
				t.Errorf("Append(prefix) = %x, want prefix then %x", got, enc)
			}

			buf := append(bytes.Clone(enc), make([]byte, tail)...)
			buf = append(buf, 0xEE, 0xEE, 0xEE) // trailing bytes that do not belong to the header
			h, n, err := parse(buf)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if n != size+tail {
				t.Errorf("parse consumed %d bytes, want %d", n, size+tail)
			}
			if len(h) != size+tail {
				t.Errorf("view length %d, want %d", len(h), size+tail)
			}
			if len(h) > 0 && &h[0] != &buf[0] {
				t.Errorf("view does not alias the input")
			}
			if !valid(h) {
				t.Errorf("IsValid() = false on a parsed header")
			}
			if got := fields(h); got != f {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, f)
			}
			if got := fields(h).Append(nil); !bytes.Equal(got, enc) {
				t.Errorf("re-encode = %x, want %x", got, enc)
			}

			whole := buf[:size+tail]
			for i := range len(whole) {
				h, n, err := parse(whole[:i:i])
				checkShort(t, fmt.Sprintf("prefix %d", i), err)
				if h != nil || n != 0 {
					t.Errorf("prefix %d: got view %x and n %d with an error", i, h, n)
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
	case wire.ReasonOf(err) != wire.ReasonShort:
		t.Errorf("%s: reason %v, want short", what, wire.ReasonOf(err))
	}
}

func TestBTHTriad(t *testing.T) {
	triad(t, wire.BTHSize, map[string]wire.BTHFields{
		"zero": {},
		"max": {Opcode: 0xFF, SE: true, MigReq: true, PadCnt: 3, TVer: 15, PKey: 0xFFFF,
			FECN: true, BECN: true, Resv6: 0x3F, DestQP: 0xFFFFFF, AckReq: true, Resv7: 0x7F, PSN: 0xFFFFFF},
		"rxe send only": {Opcode: wire.SendOnly, PadCnt: 2, PKey: wire.PKeyDefault, DestQP: 0x11, AckReq: true, PSN: 0x2A0A66},
		"ud to qp1":     {Opcode: wire.UDSendOnly, PKey: wire.PKeyDefault, DestQP: wire.QPNGSI, PSN: 1},
		"alternating": {Opcode: 0xA5, SE: true, PadCnt: 1, TVer: 0xA, PKey: 0x5AA5, BECN: true, Resv6: 0x15,
			DestQP: 0xA5A5A5, Resv7: 0x55, PSN: 0x5A5A5A},
		"psn 2^23":   {Opcode: wire.Acknowledge, PKey: 0x7FFF, DestQP: 0x800000, PSN: 0x800000},
		"bits alone": {MigReq: true, FECN: true, DestQP: 1},
	}, wire.ParseBTH, wire.BTH.Fields, func(h wire.BTH) bool { return len(h) >= wire.BTHSize }, 0)
}

func TestRETHTriad(t *testing.T) {
	triad(t, wire.RETHSize, map[string]wire.RETHFields{
		"zero": {},
		"max":  {VA: ^uint64(0), RKey: 0xFFFFFFFF, DMALen: 0xFFFFFFFF},
		"rxe":  {VA: 0x000055d18403c000, RKey: 0x286, DMALen: 65536},
		"2^31": {VA: 1 << 63, RKey: 1 << 31, DMALen: 1 << 31},
	}, wire.ParseRETH, wire.RETH.Fields, wire.RETH.IsValid, 0)
}

func TestAETHTriad(t *testing.T) {
	triad(t, wire.AETHSize, map[string]wire.AETHFields{
		"zero":     {},
		"max":      {Syndrome: 0xFF, MSN: 0xFFFFFF},
		"rxe ack":  {Syndrome: wire.SyndromeACK, MSN: 1},
		"rnr":      {Syndrome: wire.SyndromeRNR(31), MSN: 0x800000},
		"nak":      {Syndrome: wire.SyndromeRemoteOp, MSN: 0x123456},
		"psn seq":  {Syndrome: wire.SyndromePSNSeqError, MSN: 0xFFFFFE},
		"reserved": {Syndrome: 0x40, MSN: 7},
	}, wire.ParseAETH, wire.AETH.Fields, wire.AETH.IsValid, 0)
}

func TestAtomicETHTriad(t *testing.T) {
	triad(t, wire.AtomicETHSize, map[string]wire.AtomicETHFields{
		"zero":  {},
		"max":   {VA: ^uint64(0), RKey: 0xFFFFFFFF, SwapAdd: ^uint64(0), Compare: ^uint64(0)},
		"cas":   {VA: 0x000055d18403c000, RKey: 0x286, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718},
		"fadd":  {VA: 8, RKey: 1, SwapAdd: 1},
		"split": {VA: 1 << 63, RKey: 1 << 31, SwapAdd: 1 << 63, Compare: 1},
	}, wire.ParseAtomicETH, wire.AtomicETH.Fields, wire.AtomicETH.IsValid, 0)
}

func TestAtomicAckETHTriad(t *testing.T) {
	triad(t, wire.AtomicAckETHSize, map[string]wire.AtomicAckETHFields{
		"zero": {},
		"max":  {Orig: ^uint64(0)},
		"rxe":  {Orig: 10210567827892025169},
		"one":  {Orig: 1},
	}, wire.ParseAtomicAckETH, wire.AtomicAckETH.Fields, wire.AtomicAckETH.IsValid, 0)
}

func TestImmDtTriad(t *testing.T) {
	triad(t, wire.ImmDtSize, map[string]wire.ImmDtFields{
		"zero": {},
		"max":  {Imm: 0xFFFFFFFF},
		"beef": {Imm: 0xDEADBEEF},
		"one":  {Imm: 1},
	}, wire.ParseImmDt, wire.ImmDt.Fields, wire.ImmDt.IsValid, 0)
}

func TestIETHTriad(t *testing.T) {
	triad(t, wire.IETHSize, map[string]wire.IETHFields{
		"zero": {},
		"max":  {RKey: 0xFFFFFFFF},
		"key":  {RKey: 0x00012345},
		"top":  {RKey: 1 << 31},
	}, wire.ParseIETH, wire.IETH.Fields, wire.IETH.IsValid, 0)
}

func TestDETHTriad(t *testing.T) {
	triad(t, wire.DETHSize, map[string]wire.DETHFields{
		"zero": {},
		"max":  {QKey: 0xFFFFFFFF, Resv8: 0xFF, SrcQP: 0xFFFFFF},
		"gsi":  {QKey: wire.QKeyGSI, SrcQP: wire.QPNGSI},
		"ud":   {QKey: 0x11111111, SrcQP: 0x11},
		"resv": {Resv8: 0x80, SrcQP: 0x800000},
	}, wire.ParseDETH, wire.DETH.Fields, wire.DETH.IsValid, 0)
}

func TestMADTriad(t *testing.T) {
	triad(t, wire.MADHeaderSize, map[string]wire.MADFields{
		"min": {BaseVersion: 1},
		"max": {BaseVersion: 1, MgmtClass: 0xFF, ClassVersion: 0xFF, Method: 0xFF, Status: 0xFFFF,
			ClassSpecific: 0xFFFF, TransactionID: ^uint64(0), AttributeID: 0xFFFF, Reserved: 0xFFFF,
			AttributeModifier: 0xFFFFFFFF},
		"cm req": {BaseVersion: wire.MADBaseVersion, MgmtClass: wire.MgmtClassCM, ClassVersion: wire.CMClassVersion,
			Method: wire.MethodSend, TransactionID: 0x000000027bf97160, AttributeID: 0x0010},
		"get resp": {BaseVersion: 1, MgmtClass: wire.MgmtClassCM, ClassVersion: 2, Method: wire.MethodGetResp,
			AttributeID: 0x0001, Status: 0x0004},
	}, wire.ParseMAD, wire.MAD.Fields, wire.MAD.IsValid, wire.MADDataSize)
}

// A MAD whose base version is not 1 is malformed, not short.
func TestMADBaseVersion(t *testing.T) {
	for _, v := range []uint8{0, 2, 0x81, 0xFF} {
		b := wire.MADFields{BaseVersion: v, MgmtClass: wire.MgmtClassCM}.Append(nil)
		b = append(b, make([]byte, wire.MADDataSize)...)
		m, n, err := wire.ParseMAD(b)
		if err == nil || m != nil || n != 0 {
			t.Errorf("base version %d: got %x, %d, %v; want an error", v, m, n, err)
			continue
		}
		if wire.ReasonOf(err) != wire.ReasonMAD || errors.Is(err, wire.ErrShortPacket) {
			t.Errorf("base version %d: error %v has reason %v, want mad and not short", v, err, wire.ReasonOf(err))
		}
		if wire.MAD(b).IsValid() {
			t.Errorf("base version %d: IsValid true", v)
		}
	}
	m := wire.MAD(append(wire.MADFields{BaseVersion: 1, Method: 0x83}.Append(nil), make([]byte, wire.MADDataSize)...))
	if !m.Response() || m.Method() != 0x83 {
		t.Errorf("Response() = %v, Method() = %#x; want true, 0x83", m.Response(), m.Method())
	}
	if got := len(m.Data()); got != wire.MADDataSize {
		t.Errorf("len(Data()) = %d, want %d", got, wire.MADDataSize)
	}
}

// Out-of-range field values are truncated to their widths and do not spill
// into neighbouring fields.
func TestAppendTruncatesWideValues(t *testing.T) {
	bth := wire.BTHFields{PadCnt: 0xFC, TVer: 0xF0, Resv6: 0xC0, DestQP: 0xFF000000, Resv7: 0x80, PSN: 0xFF000000}
	if got := bth.Append(nil); !bytes.Equal(got, make([]byte, wire.BTHSize)) {
		t.Errorf("BTH with only out-of-range bits = %x, want zeros", got)
	}
	if got := (wire.AETHFields{Syndrome: 0x1F, MSN: 0xFF000001}).Append(nil); !bytes.Equal(got, []byte{0x1F, 0, 0, 1}) {
		t.Errorf("AETH = %x, want 1f000001", got)
	}
	if got := (wire.DETHFields{SrcQP: 0xAB000002}).Append(nil); !bytes.Equal(got, []byte{0, 0, 0, 0, 0, 0, 0, 2}) {
		t.Errorf("DETH = %x, want 0000000000000002", got)
	}
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Known bytes against known fields, so that a mistake made symmetrically in
// an accessor and in Append (which a round trip cannot see) is caught.
func TestHeaderVectors(t *testing.T) {
	t.Run("BTH example A", func(t *testing.T) {
		h, _, err := wire.ParseBTH(mustHex(t, "04 10 ff ff 00 00 00 11 80 00 00 01"))
		if err != nil {
			t.Fatal(err)
		}
		want := wire.BTHFields{Opcode: wire.SendOnly, PadCnt: 1, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 1}
		if got := h.Fields(); got != want {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
		if !h.IsValid() {
			t.Error("IsValid false")
		}
	})
	t.Run("BTH every bit", func(t *testing.T) {
		h, _, _ := wire.ParseBTH(mustHex(t, "a5 d7 12 34 96 ab cd ef 85 01 02 03"))
		want := wire.BTHFields{Opcode: 0xA5, SE: true, MigReq: true, PadCnt: 1, TVer: 7, PKey: 0x1234,
			FECN: true, BECN: false, Resv6: 0x16, DestQP: 0xABCDEF, AckReq: true, Resv7: 5, PSN: 0x010203}
		if got := h.Fields(); got != want {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
		if h.IsValid() {
			t.Error("IsValid true with TVer 7")
		}
		if h.SE() != want.SE || h.MigReq() != want.MigReq || h.FECN() != want.FECN || h.BECN() != want.BECN {
			t.Error("flag accessors disagree with Fields")
		}
	})
	t.Run("BTH setters", func(t *testing.T) {
		b := mustHex(t, "04 00 ff ff 00 00 00 11 7f 00 00 00")
		h := wire.BTH(b)
		h.SetPSN(0x1ABCDEF) // the bit above 24 is dropped
		h.SetAckReq(true)
		if want := mustHex(t, "04 00 ff ff 00 00 00 11 ff ab cd ef"); !bytes.Equal(b, want) {
			t.Errorf("after SetPSN/SetAckReq: %x, want %x", b, want)
		}
		h.SetAckReq(false)
		if h.AckReq() || h.Resv7() != 0x7F || h.PSN() != 0xABCDEF {
			t.Errorf("SetAckReq(false) changed other bits: %x", b)
		}
	})
	t.Run("RETH", func(t *testing.T) {
		h, _, _ := wire.ParseRETH(mustHex(t, "00 00 55 d1 84 03 c0 00 00 00 02 86 00 01 00 00"))
		want := wire.RETHFields{VA: 0x55d18403c000, RKey: 0x286, DMALen: 65536}
		if got := h.Fields(); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("AETH", func(t *testing.T) {
		h, _, _ := wire.ParseAETH(mustHex(t, "62 12 34 56"))
		if h.Syndrome() != wire.SyndromeRemoteAccess || h.MSN() != 0x123456 {
			t.Errorf("got %v %#x", h.Syndrome(), h.MSN())
		}
	})
	t.Run("AtomicETH", func(t *testing.T) {
		h, _, _ := wire.ParseAtomicETH(mustHex(t, `00 00 00 00 00 00 10 00  00 00 00 2a
			01 02 03 04 05 06 07 08  11 12 13 14 15 16 17 18`))
		want := wire.AtomicETHFields{VA: 0x1000, RKey: 0x2A, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718}
		if got := h.Fields(); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("AtomicAckETH", func(t *testing.T) {
		h, _, _ := wire.ParseAtomicAckETH(mustHex(t, "8d b3 6e 55 8d b3 6e 51"))
		if h.Orig() != 0x8db36e558db36e51 {
			t.Errorf("got %#x", h.Orig())
		}
	})
	t.Run("ImmDt", func(t *testing.T) {
		h, _, _ := wire.ParseImmDt(mustHex(t, "de ad be ef"))
		if h.Imm() != 0xDEADBEEF {
			t.Errorf("got %#x", h.Imm())
		}
	})
	t.Run("IETH", func(t *testing.T) {
		h, _, _ := wire.ParseIETH(mustHex(t, "00 01 23 45"))
		if h.RKey() != 0x12345 {
			t.Errorf("got %v", h.RKey())
		}
	})
	t.Run("DETH", func(t *testing.T) {
		h, _, _ := wire.ParseDETH(mustHex(t, "80 01 00 00 7e 00 00 01"))
		want := wire.DETHFields{QKey: wire.QKeyGSI, Resv8: 0x7E, SrcQP: 1}
		if got := h.Fields(); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("MAD", func(t *testing.T) {
		b := mustHex(t, `01 07 02 03 00 00 00 00 00 00 00 02 7b f9 71 60 00 10 00 00 00 00 00 00`)
		b = append(b, make([]byte, wire.MADDataSize)...)
		m, n, err := wire.ParseMAD(b)
		if err != nil || n != wire.MADSize {
			t.Fatalf("ParseMAD: %d %v", n, err)
		}
		want := wire.MADFields{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3,
			TransactionID: 0x27bf97160, AttributeID: 0x10}
		if got := m.Fields(); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}
