package stream

import (
	"bytes"
	"testing"
)

// FuzzParse: the handshake and control-message parsers return an error
// or a value, never panic, and what they accept encodes back to the same
// bytes.
func FuzzParse(f *testing.F) {
	f.Add(ringInfo{addr: 1 << 40, rkey: 7, slotSize: DefaultSlotSize, slots: DefaultSlots}.marshal())
	b := make([]byte, msgSize)
	(&msg{typ: msgFin, count: 3, bytes: 1000, sum: 0x01020304}).marshal(b)
	f.Add(b)
	f.Add([]byte("tbs1"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if r, err := parseRingInfo(in); err == nil {
			if out := r.marshal(); !bytes.Equal(out, in[:ringInfoSize]) {
				t.Fatalf("ring %x re-encodes as %x", in[:ringInfoSize], out)
			}
		}
		if m, err := parseMsg(in); err == nil {
			out := make([]byte, msgSize)
			m.marshal(out)
			if !bytes.Equal(out, in[:msgSize]) {
				t.Fatalf("message %x re-encodes as %x", in[:msgSize], out)
			}
		}
	})
}
