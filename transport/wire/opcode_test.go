package wire_test

import (
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// refOp is one row of the opcode table in roce-wire.md §2.3, typed in
// independently of opcode.go.
type refOp struct {
	op      wire.Opcode
	name    string // without the "RC "/"UC "/"UD " prefix
	hdrs    []string
	payload bool
}

func refTable() []refOp {
	rc := []refOp{
		{0x00, "SEND_FIRST", nil, true},
		{0x01, "SEND_MIDDLE", nil, true},
		{0x02, "SEND_LAST", nil, true},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", []string{"ImmDt"}, true},
		{0x04, "SEND_ONLY", nil, true},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", []string{"ImmDt"}, true},
		{0x06, "RDMA_WRITE_FIRST", []string{"RETH"}, true},
		{0x07, "RDMA_WRITE_MIDDLE", nil, true},
		{0x08, "RDMA_WRITE_LAST", nil, true},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", []string{"ImmDt"}, true},
		{0x0A, "RDMA_WRITE_ONLY", []string{"RETH"}, true},
		{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", []string{"RETH", "ImmDt"}, true},
	}
	var t []refOp
	for _, r := range rc {
		t = append(t, refOp{r.op, "RC " + r.name, r.hdrs, r.payload})
	}
	t = append(t,
		refOp{0x0C, "RC RDMA_READ_REQUEST", []string{"RETH"}, false},
		refOp{0x0D, "RC RDMA_READ_RESPONSE_FIRST", []string{"AETH"}, true},
		refOp{0x0E, "RC RDMA_READ_RESPONSE_MIDDLE", nil, true},
		refOp{0x0F, "RC RDMA_READ_RESPONSE_LAST", []string{"AETH"}, true},
		refOp{0x10, "RC RDMA_READ_RESPONSE_ONLY", []string{"AETH"}, true},
		refOp{0x11, "RC ACKNOWLEDGE", []string{"AETH"}, false},
		refOp{0x12, "RC ATOMIC_ACKNOWLEDGE", []string{"AETH", "AtomicAckETH"}, false},
		refOp{0x13, "RC COMPARE_SWAP", []string{"AtomicETH"}, false},
		refOp{0x14, "RC FETCH_ADD", []string{"AtomicETH"}, false},
		refOp{0x16, "RC SEND_LAST_WITH_INVALIDATE", []string{"IETH"}, true},
		refOp{0x17, "RC SEND_ONLY_WITH_INVALIDATE", []string{"IETH"}, true},
	)
	for _, r := range rc {
		t = append(t, refOp{0x20 | r.op, "UC " + r.name, r.hdrs, r.payload})
	}
	t = append(t,
		refOp{0x64, "UD SEND_ONLY", []string{"DETH"}, true},
		refOp{0x65, "UD SEND_ONLY_WITH_IMMEDIATE", []string{"DETH", "ImmDt"}, true},
	)
	return t
}

var hdrInfo = map[string]struct {
	flag wire.HdrMask
	size int
}{
	"DETH":         {wire.HasDETH, 8},
	"RETH":         {wire.HasRETH, 16},
	"AtomicETH":    {wire.HasAtomicETH, 28},
	"AETH":         {wire.HasAETH, 4},
	"AtomicAckETH": {wire.HasAtomicAckETH, 8},
	"ImmDt":        {wire.HasImmDt, 4},
	"IETH":         {wire.HasIETH, 4},
}

const hdrFlags = wire.HasDETH | wire.HasRETH | wire.HasAtomicETH | wire.HasAETH |
	wire.HasAtomicAckETH | wire.HasImmDt | wire.HasIETH | wire.HasPayload

func TestOpcodeTable(t *testing.T) {
	ref := refTable()
	if len(ref) != 12+11+12+2 {
		t.Fatalf("reference table has %d rows", len(ref))
	}
	seen := map[wire.Opcode]bool{}
	for _, r := range ref {
		seen[r.op] = true
		t.Run(r.name, func(t *testing.T) {
			info := r.op.Info()
			if info.Name != r.name || r.op.String() != r.name {
				t.Errorf("name %q / String %q, want %q", info.Name, r.op.String(), r.name)
			}
			if !r.op.Valid() {
				t.Fatal("not Valid")
			}
			var want wire.HdrMask
			n := wire.BTHSize
			for _, h := range r.hdrs {
				want |= hdrInfo[h].flag
				n += hdrInfo[h].size
			}
			if r.payload {
				want |= wire.HasPayload
			}
			if got := info.Flags & hdrFlags; got != want {
				t.Errorf("header flags %#x, want %#x", got, want)
			}
			if info.HdrLen != n || r.op.HdrLen() != n {
				t.Errorf("HdrLen %d / %d, want %d", info.HdrLen, r.op.HdrLen(), n)
			}
			if n > wire.MaxHeaderRoom {
				t.Errorf("HdrLen %d exceeds MaxHeaderRoom %d", n, wire.MaxHeaderRoom)
			}
			if !r.op.Has(want) {
				t.Errorf("Has(%#x) false", want)
			}

			// Message position, direction and kind follow from the name.
			name := r.name[3:]
			pos := map[string]wire.HdrMask{"FIRST": wire.IsFirst, "MIDDLE": wire.IsMiddle, "LAST": wire.IsLast, "ONLY": wire.IsOnly}
			var wantPos wire.HdrMask
			for word, f := range pos {
				if strings.Contains(name, word) {
					wantPos |= f
				}
			}
			if name == "RDMA_READ_REQUEST" || name == "ACKNOWLEDGE" || name == "ATOMIC_ACKNOWLEDGE" ||
				name == "COMPARE_SWAP" || name == "FETCH_ADD" {
				wantPos = wire.IsOnly
			}
			if got := info.Flags & (wire.IsFirst | wire.IsMiddle | wire.IsLast | wire.IsOnly); got != wantPos {
				t.Errorf("position flags %#x, want %#x", got, wantPos)
			}
			response := strings.HasPrefix(name, "RDMA_READ_RESPONSE") || strings.HasSuffix(name, "ACKNOWLEDGE")
			if r.op.Has(wire.IsRequest) == response {
				t.Errorf("IsRequest = %v for a %s", !response, name)
			}
			if got, want := r.op.Has(wire.IsSend), strings.HasPrefix(name, "SEND"); got != want {
				t.Errorf("IsSend = %v, want %v", got, want)
			}
			if got, want := r.op.Has(wire.IsWrite), strings.HasPrefix(name, "RDMA_WRITE"); got != want {
				t.Errorf("IsWrite = %v, want %v", got, want)
			}
			if got, want := r.op.Has(wire.IsRead), strings.HasPrefix(name, "RDMA_READ"); got != want {
				t.Errorf("IsRead = %v, want %v", got, want)
			}
			if got, want := r.op.IsAtomic(), name == "COMPARE_SWAP" || name == "FETCH_ADD"; got != want {
				t.Errorf("IsAtomic = %v, want %v", got, want)
			}
			if got, want := r.op.Class(), r.op&0xE0; got != want {
				t.Errorf("Class = %#x, want %#x", got, want)
			}
			if r.op.Class()|r.op.Op() != r.op {
				t.Errorf("Class|Op = %#x", r.op.Class()|r.op.Op())
			}
		})
	}

	// Everything else is unknown: RC 0x15 and 0x18-0x1F (including FLUSH and
	// ATOMIC_WRITE, which tbrdma does not speak), UC 0x2C-0x3F, RD 0x40-0x5F,
	// UD other than 0x64/0x65, CNP 0x81 and the rest of 0x80-0xFF.
	for op := range 256 {
		op := wire.Opcode(op)
		if seen[op] {
			continue
		}
		if op.Valid() || op.HdrLen() != 0 || op.Info().Name != "" {
			t.Errorf("opcode %#02x: Valid %v HdrLen %d Name %q; want unknown", uint8(op), op.Valid(), op.HdrLen(), op.Info().Name)
		}
		if got, want := op.String(), "opcode(0x"; !strings.HasPrefix(got, want) {
			t.Errorf("opcode %#02x: String %q", uint8(op), got)
		}
	}
	for _, op := range []wire.Opcode{0x15, 0x18, 0x1C, 0x1D, 0x1F, 0x2C, 0x40, 0x4A, 0x55, 0x60, 0x66, 0x81, 0xA0, 0xC0, 0xFF} {
		if seen[op] {
			t.Errorf("opcode %#02x is in the reference table", uint8(op))
		}
	}
	if wire.UDSendOnly != 0x64 || wire.UDSendOnlyImm != 0x65 {
		t.Errorf("UD opcodes %#x %#x", wire.UDSendOnly, wire.UDSendOnlyImm)
	}
}

// Packet.Parse rejects every opcode outside the table with ReasonOpcode,
// however the rest of the packet looks.
func TestParseRejectsUnknownOpcodes(t *testing.T) {
	ref := map[wire.Opcode]bool{}
	for _, r := range refTable() {
		ref[r.op] = true
	}
	for op := range 256 {
		op := wire.Opcode(op)
		if ref[op] {
			continue
		}
		for _, size := range []int{wire.BTHSize + wire.ICRCSize, 64, 300} {
			b := make([]byte, size)
			wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: 0x11, PSN: 5}.Append(b[:0])
			var p wire.Packet
			err := p.Parse(b)
			if wire.ReasonOf(err) != wire.ReasonOpcode {
				t.Errorf("opcode %#02x, %d bytes: error %v, want reason opcode", uint8(op), size, err)
			}
		}
	}
}

func TestPadCount(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		if got := wire.PadCount(n); got != want {
			t.Errorf("PadCount(%d) = %d, want %d", n, got, want)
		}
	}
	for _, n := range []int{1021, 1022, 1023, 1024, 4095, 4096, 65535} {
		if got := wire.PadCount(n); (n+got)%4 != 0 || got > 3 {
			t.Errorf("PadCount(%d) = %d", n, got)
		}
	}
}
