package wire_test

import (
	"bytes"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// The seed corpora live in testdata/fuzz/FuzzXxx/. The files named rxe-*
// are cut from the rdma_rxe captures by TestWriteFuzzSeeds
// (go test -run TestWriteFuzzSeeds -write-fuzz-seeds); the f.Add calls
// below add synthetic edge cases.

// FuzzPacket: Parse returns an error or a packet, never both; a parsed
// packet re-encodes to its input; the ICRC functions never panic and agree
// with each other.
func FuzzPacket(f *testing.F) {
	for _, r := range refTable() {
		h := allHeaders(r.op)
		n := 0
		if r.payload {
			n = 5
		}
		pkt := wire.AppendPacket(nil, &h, payloadOf(n))
		wire.PutICRC(pkt, src4, dst4, 0x1234)
		f.Add(pkt)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Add([]byte{0x11, 0x01, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 1, 0x1f, 0, 0, 1, 0, 0, 0, 0}) // tver 1
	f.Add([]byte{0x04, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 1, 0xaa, 0, 0, 0, 0})          // pad 3 > 1

	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		var p wire.Packet
		err := p.Parse(data)
		if !bytes.Equal(in, data) {
			t.Fatal("Parse modified its input")
		}
		// The ICRC check never panics, whatever Parse thinks.
		for _, a := range []struct{ src, dst netip.AddrPort }{{src4, dst4}, {src6, dst6}} {
			if id, ok := wire.VerifyICRC(data, a.src, a.dst); ok {
				body := data[:len(data)-wire.ICRCSize]
				if got := wire.ICRC(a.src, a.dst, id, body); got != wire.Trailer(data) {
					t.Fatalf("VerifyICRC ok with id %#x, but ICRC with that id = %#x, trailer %#x", id, got, wire.Trailer(data))
				}
			}
		}
		if err != nil {
			if !reflect.ValueOf(p).IsZero() {
				t.Fatalf("Parse returned %v and a packet %+v", err, p)
			}
			r := wire.ReasonOf(err)
			if r == wire.ReasonNone || r == wire.ReasonICRC || r == wire.ReasonMAD {
				t.Fatalf("error %v has reason %v", err, r)
			}
			if (r == wire.ReasonShort) != errors.Is(err, wire.ErrShortPacket) {
				t.Fatalf("error %v: reason %v but errors.Is(ErrShortPacket) = %v", err, r, !(r == wire.ReasonShort))
			}
			return
		}

		op := p.Opcode()
		if !op.Valid() || p.BTH.TVer() != 0 || p.BTH.DestQP() == 0 {
			t.Fatalf("accepted opcode %v tver %d qpn %v", op, p.BTH.TVer(), p.BTH.DestQP())
		}
		if !op.Has(wire.HasPayload) && len(p.Payload)+len(p.Pad) != 0 {
			t.Fatalf("%v carries %d payload bytes", op, len(p.Payload))
		}
		if len(p.Pad) != p.BTH.PadCnt() || len(p.ICRC) != wire.ICRCSize {
			t.Fatalf("pad %d (PadCnt %d), ICRC %d bytes", len(p.Pad), p.BTH.PadCnt(), len(p.ICRC))
		}
		// Re-encoding the parsed fields gives back the input exactly.
		h := p.Fields()
		enc := h.Append(nil)
		if len(enc) != op.HdrLen() || len(enc) != h.Len() {
			t.Fatalf("headers re-encode to %d bytes, HdrLen %d", len(enc), op.HdrLen())
		}
		enc = append(enc, p.Payload...)
		enc = append(enc, p.Pad...)
		enc = append(enc, p.ICRC...)
		if !bytes.Equal(enc, data) {
			t.Fatalf("re-encoded\n%x\ninput\n%x", enc, data)
		}
		// Canonical packets (right pad, zero pad bytes) also come back
		// through AppendPacket.
		if p.BTH.PadCnt() == wire.PadCount(len(p.Payload)) && bytes.Equal(p.Pad, make([]byte, len(p.Pad))) {
			again := wire.AppendPacket(nil, &h, p.Payload)
			copy(again[len(again)-wire.ICRCSize:], p.ICRC)
			if !bytes.Equal(again, data) {
				t.Fatalf("AppendPacket re-encoded\n%x\ninput\n%x", again, data)
			}
		}
		// Each view agrees with its own parser.
		checkView(t, p.DETH, wire.ParseDETH, wire.DETH.Fields)
		checkView(t, p.RETH, wire.ParseRETH, wire.RETH.Fields)
		checkView(t, p.AtomicETH, wire.ParseAtomicETH, wire.AtomicETH.Fields)
		checkView(t, p.AETH, wire.ParseAETH, wire.AETH.Fields)
		checkView(t, p.AtomicAckETH, wire.ParseAtomicAckETH, wire.AtomicAckETH.Fields)
		checkView(t, p.ImmDt, wire.ParseImmDt, wire.ImmDt.Fields)
		checkView(t, p.IETH, wire.ParseIETH, wire.IETH.Fields)
		if p.BTH.DestQP() == wire.QPNGSI {
			if m, _, err := wire.ParseMAD(p.Payload); err == nil {
				_ = m.Fields()
			}
		}
		// The ICRC helpers agree with each other.
		body := data[:len(data)-wire.ICRCSize]
		ip := mustHexF("45 00 00 00 00 00 40 00 40 11 00 00 c6 12 00 02 c6 12 00 03")
		ip[2], ip[3] = byte((20+8+len(data))>>8), byte(20+8+len(data))
		ip[4], ip[5] = 0xAB, 0xCD
		udp := []byte{0xc0, 0x00, 0x12, 0xb7, byte((8 + len(data)) >> 8), byte(8 + len(data)), 0, 0}
		got, ok := wire.ICRCFromHeaders(ip, udp, body)
		if want := wire.ICRC(src4, dst4, 0xABCD, body); !ok || got != want {
			t.Fatalf("ICRCFromHeaders %#x %v, ICRC %#x", got, ok, want)
		}
		pkt := bytes.Clone(data)
		wire.PutICRC(pkt, src4, dst4, 0xABCD)
		if id, ok := wire.VerifyICRC(pkt, src4, dst4); !ok || id != 0xABCD {
			t.Fatalf("VerifyICRC after PutICRC(id 0xabcd) = %#x %v", id, ok)
		}
	})
}

func mustHexF(s string) []byte {
	b := make([]byte, 0, 20)
	var v, n byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v, n = v<<4|(c-'0'), n+1
		case c >= 'a' && c <= 'f':
			v, n = v<<4|(c-'a'+10), n+1
		default:
			continue
		}
		if n == 2 {
			b, v, n = append(b, v), 0, 0
		}
	}
	return b
}

func checkView[H ~[]byte, F comparable](t *testing.T, v H, parse func([]byte) (H, int, error), fields func(H) F) {
	t.Helper()
	if v == nil {
		return
	}
	h, n, err := parse(v)
	if err != nil || n != len(v) || fields(h) != fields(v) {
		t.Fatalf("view %x: parse %x %d %v", v, h, n, err)
	}
}

// fuzzHeader checks a header parser: an error (short, nothing returned) or
// a view of exactly size bytes that aliases the input and re-encodes to it.
func fuzzHeader[H ~[]byte, F interface {
	comparable
	Len() int
	Append([]byte) []byte
}](t *testing.T, data []byte, size int, parse func([]byte) (H, int, error), fields func(H) F) {
	in := bytes.Clone(data)
	h, n, err := parse(data)
	if !bytes.Equal(in, data) {
		t.Fatal("parser modified its input")
	}
	if err != nil {
		if h != nil || n != 0 {
			t.Fatalf("error %v with view %x and n %d", err, h, n)
		}
		if len(data) >= size || !errors.Is(err, wire.ErrShortPacket) || wire.ReasonOf(err) != wire.ReasonShort {
			t.Fatalf("%d bytes: error %v", len(data), err)
		}
		return
	}
	if len(data) < size || n != size || len(h) != size || &h[0] != &data[0] {
		t.Fatalf("%d bytes: view of %d, n %d", len(data), len(h), n)
	}
	f := fields(h)
	if enc := f.Append(nil); !bytes.Equal(enc, data[:size]) || f.Len() != len(enc) {
		t.Fatalf("re-encoded %x, input %x", enc, data[:size])
	}
	if again, _, _ := parse(f.Append(nil)); fields(again) != f {
		t.Fatalf("round trip %+v -> %+v", f, fields(again))
	}
}

func FuzzBTH(f *testing.F) {
	f.Add(mustHexF("04 10 ff ff 00 00 00 11 80 00 00 01"))
	f.Add(mustHexF("ff ff ff ff ff ff ff ff ff ff ff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.BTHSize, wire.ParseBTH, wire.BTH.Fields)
		if h, _, err := wire.ParseBTH(data); err == nil {
			if h.IsValid() != (h.TVer() == 0) || h.PadCnt() > 3 || !h.DestQP().Valid() && h.DestQP() != 0 || !h.PSN().Valid() {
				t.Fatalf("BTH %x: accessors out of range", h)
			}
		}
	})
}

func FuzzRETH(f *testing.F) {
	f.Add(mustHexF("00 00 55 d1 84 03 c0 00 00 00 02 86 00 01 00 00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.RETHSize, wire.ParseRETH, wire.RETH.Fields)
	})
}

func FuzzAETH(f *testing.F) {
	f.Add(mustHexF("1f 00 00 01"))
	f.Add(mustHexF("62 ff ff ff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.AETHSize, wire.ParseAETH, wire.AETH.Fields)
		if h, _, err := wire.ParseAETH(data); err == nil {
			s := h.Syndrome()
			if s.Type() > 3 || s.Value() > 31 || s.String() == "" || wire.RNRTimer(s.Value()) <= 0 {
				t.Fatalf("syndrome %#x", uint8(s))
			}
		}
	})
}

func FuzzAtomicETH(f *testing.F) {
	f.Add(mustHexF("00 00 55 d1 84 03 c0 00 00 00 02 86 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.AtomicETHSize, wire.ParseAtomicETH, wire.AtomicETH.Fields)
	})
}

func FuzzAtomicAckETH(f *testing.F) {
	f.Add(mustHexF("8d b3 6e 55 8d b3 6e 51"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.AtomicAckETHSize, wire.ParseAtomicAckETH, wire.AtomicAckETH.Fields)
	})
}

func FuzzImmDt(f *testing.F) {
	f.Add(mustHexF("de ad be ef"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.ImmDtSize, wire.ParseImmDt, wire.ImmDt.Fields)
	})
}

func FuzzIETH(f *testing.F) {
	f.Add(mustHexF("00 01 23 45"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.IETHSize, wire.ParseIETH, wire.IETH.Fields)
	})
}

func FuzzDETH(f *testing.F) {
	f.Add(mustHexF("80 01 00 00 00 00 00 01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzHeader(t, data, wire.DETHSize, wire.ParseDETH, wire.DETH.Fields)
	})
}

// FuzzMAD: ParseMAD returns an error (short, or base version not 1) or a
// whole 256-byte MAD whose header re-encodes to the input.
func FuzzMAD(f *testing.F) {
	f.Add(append(mustHexF("01 07 02 03 00 00 00 00 00 00 00 02 7b f9 71 60 00 10 00 00 00 00 00 00"), make([]byte, wire.MADDataSize)...))
	f.Add(make([]byte, wire.MADSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		m, n, err := wire.ParseMAD(data)
		if !bytes.Equal(in, data) {
			t.Fatal("ParseMAD modified its input")
		}
		if err != nil {
			if m != nil || n != 0 {
				t.Fatalf("error %v with a MAD", err)
			}
			switch wire.ReasonOf(err) {
			case wire.ReasonShort:
				if len(data) >= wire.MADSize || !errors.Is(err, wire.ErrShortPacket) {
					t.Fatalf("%d bytes: %v", len(data), err)
				}
			case wire.ReasonMAD:
				if len(data) < wire.MADSize || data[0] == wire.MADBaseVersion || errors.Is(err, wire.ErrShortPacket) {
					t.Fatalf("%d bytes, version %d: %v", len(data), data[0], err)
				}
			default:
				t.Fatalf("error %v", err)
			}
			return
		}
		if n != wire.MADSize || len(m) != wire.MADSize || &m[0] != &data[0] || !m.IsValid() {
			t.Fatalf("MAD of %d bytes, n %d", len(m), n)
		}
		fl := m.Fields()
		enc := append(fl.Append(nil), m.Data()...)
		if !bytes.Equal(enc, data[:wire.MADSize]) || fl.Len() != wire.MADHeaderSize {
			t.Fatalf("re-encoded %x", enc)
		}
		if m.Response() != (m.Method()&0x80 != 0) {
			t.Fatal("Response disagrees with Method")
		}
	})
}

// FuzzRecoverIPv4ID: any (diff, len) is handled without a panic; an ID it
// returns reproduces diff; and the ID behind a computed diff is found.
func FuzzRecoverIPv4ID(f *testing.F) {
	f.Add(uint32(0), 12)
	f.Add(uint32(0xFFFFFFFF), 0)
	f.Add(uint32(0x12345678), 4108)
	f.Add(uint32(1), -1)
	f.Add(uint32(0x80000000), math.MaxInt32)
	body := make([]byte, 9000)
	f.Fuzz(func(t *testing.T, diff uint32, roceLen int) {
		id, ok := wire.RecoverIPv4ID(diff, roceLen)
		if roceLen < wire.BTHSize || roceLen > len(body) {
			return // lengths no packet has; only "no panic" applies
		}
		b := body[:roceLen]
		if ok {
			if got := wire.ICRC(src4, dst4, id, b) ^ wire.ICRC(src4, dst4, 0, b); got != diff {
				t.Fatalf("RecoverIPv4ID(%#x, %d) = %#x, but that ID gives diff %#x", diff, roceLen, id, got)
			}
		} else if diff == 0 {
			t.Fatal("diff 0 (ID 0) not explained")
		}
		// The forward direction: the ID behind a real diff is recovered.
		want := uint16(diff ^ diff>>16)
		d := wire.ICRC(src4, dst4, want, b) ^ wire.ICRC(src4, dst4, 0, b)
		if got, ok := wire.RecoverIPv4ID(d, roceLen); !ok || got != want {
			t.Fatalf("ID %#x, length %d: recovered %#x %v", want, roceLen, got, ok)
		}
	})
}
