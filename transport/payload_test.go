package transport

import (
	"bytes"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// splitPacket turns a whole packet into a Message with a Payload: the
// headers and the pad+trailer stay in Buf, the payload is a separate slice.
func splitPacket(pkt []byte, hl, n int, m *Message) {
	m.Payload = bytes.Clone(pkt[hl : hl+n])
	m.Buf = append(append([]byte(nil), pkt[:hl]...), pkt[hl+n:]...)
}

// Messages with a Payload arrive as the same packets as whole ones, with a
// valid ICRC, through every send path, GSO runs included, without
// allocating in the steady state.
func TestPayloadSend(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"offloads", Options{}},
		{"no offloads", Options{DisableGSO: true, DisableGRO: true}},
		{"portable", Options{forcePortable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := open(t, addrA, &tc.o)
			b := open(t, addrB, &tc.o)
			if !PayloadCapable(a) {
				t.Fatal("PayloadCapable(endpoint) = false")
			}
			var want [][]byte
			var out []Message
			for i, n := range []int{4096, 4096, 4096, 1001, 0, 4096, 3, 4096, 4096} {
				op := wire.WriteMiddle
				if n != 4096 {
					op = wire.WriteLast
				}
				pkt := testPacket(op, uint32(i), n) // padded by AppendPacket
				m := Message{Addr: addrB}
				if i%3 == 2 {
					m.Buf = pkt // a whole packet among split ones
				} else {
					splitPacket(pkt, op.HdrLen(), n, &m)
				}
				want = append(want, pkt)
				out = append(out, m)
			}
			if k, err := a.WriteBatch(out); err != nil || k != len(out) {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			got := readN(t, b, len(out))
			for i := range got {
				g, w := got[i].Buf, want[i]
				if len(g) != len(w) || !bytes.Equal(g[:len(g)-wire.ICRCSize], w[:len(w)-wire.ICRCSize]) {
					t.Fatalf("packet %d: got %d bytes, want %d (or contents differ)", i, len(g), len(w))
				}
			}
			if st := a.Stats(); st.BytesOut != uint64(totalLen(want)) {
				t.Errorf("BytesOut %d, want %d", st.BytesOut, totalLen(want))
			}
			in := make([]Message, b.BatchSize())
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := a.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for n := 0; n < len(out); {
					k, err := b.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					n += k
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per batch with payloads, want 0", allocs)
			}
		})
	}
}

func totalLen(p [][]byte) (n int) {
	for _, b := range p {
		n += len(b)
	}
	return n
}

func TestPayloadSendErrors(t *testing.T) {
	a := open(t, addrA, nil)
	for i, m := range []Message{
		{Buf: make([]byte, 6), Payload: make([]byte, 100), Addr: addrB},
		{Buf: testPacket(wire.WriteMiddle, 1, 0), Payload: make([]byte, maxUDPPayload), Addr: addrB},
	} {
		if _, err := a.WriteBatch([]Message{m}); err == nil {
			t.Errorf("message %d accepted", i)
		}
	}
	if PayloadCapable(nil) {
		t.Error("PayloadCapable(nil) = true")
	}
}
