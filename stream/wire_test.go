package stream

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// TestRingInfo: the private data of both versions encodes to the
// documented bytes (docs/wire-format.md) and parses back with its version;
// any other magic, a short one or an unusable ring is refused.
func TestRingInfo(t *testing.T) {
	r := ringInfo{addr: 0x0102030405060708, rkey: 0x11223344, slotSize: 256 << 10, slots: 16}
	for _, c := range []struct {
		sr   bool
		want string
	}{
		{false, "74627331" + "0102030405060708" + "11223344" + "00040000" + "00000010"},
		{true, "74627332" + "0102030405060708" + "11223344" + "00040000" + "00000010"},
	} {
		r.sr = c.sr
		b := r.marshal()
		if got := hex.EncodeToString(b); got != c.want {
			t.Errorf("sr %v: marshal = %s, want %s", c.sr, got, c.want)
		}
		got, err := parseRingInfo(b)
		if err != nil || got != r {
			t.Errorf("sr %v: parse = %+v, %v; want %+v", c.sr, got, err, r)
		}
		// Trailing bytes (the REQ's and REP's padding) are ignored.
		if got, err := parseRingInfo(append(b, make([]byte, 20)...)); err != nil || got != r {
			t.Errorf("sr %v: parse with padding = %+v, %v; want %+v", c.sr, got, err, r)
		}
	}
	good := r.marshal()
	for name, b := range map[string][]byte{
		"tbs0":       append([]byte("tbs0"), good[4:]...),
		"tbs3":       append([]byte("tbs3"), good[4:]...),
		"TBS2":       append([]byte("TBS2"), good[4:]...),
		"short":      good[:ringInfoSize-1],
		"magic only": []byte("tbs2"),
		"no slots":   append(bytes.Clone(good[:ringInfoSize-4]), 0, 0, 0, 0),
		"257 slots":  append(bytes.Clone(good[:ringInfoSize-4]), 0, 0, 1, 1),
		"empty slot": append(append(bytes.Clone(good[:ringInfoSize-8]), 0, 0, 0, 0), good[ringInfoSize-4:]...),
		"slot 2^24":  append(append(bytes.Clone(good[:ringInfoSize-8]), 1, 0, 0, 0), good[ringInfoSize-4:]...),
	} {
		if got, err := parseRingInfo(b); err == nil {
			t.Errorf("%s: parse %x = %+v, want an error", name, b, got)
		}
	}
}

// FuzzParse: the handshake and control-message parsers return an error
// or a value, never panic, and what they accept encodes back to the same
// bytes.
func FuzzParse(f *testing.F) {
	f.Add(ringInfo{addr: 1 << 40, rkey: 7, slotSize: DefaultSlotSize, slots: DefaultSlots}.marshal())
	f.Add(ringInfo{addr: 1 << 40, rkey: 7, slotSize: MaxSlotSize, slots: MaxSlots, sr: true}.marshal())
	b := make([]byte, msgSize)
	(&msg{typ: msgFin, count: 3, bytes: 1000, sum: 0x01020304}).marshal(b)
	f.Add(b)
	f.Add([]byte("tbs1"))
	f.Add([]byte("tbs2"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if r, err := parseRingInfo(in); err == nil {
			if out := r.marshal(); !bytes.Equal(out, in[:ringInfoSize]) {
				t.Fatalf("ring %x re-encodes as %x", in[:ringInfoSize], out)
			}
			if r.sr != (string(in[:4]) == magicV2) {
				t.Fatalf("ring %x: sr %v", in[:ringInfoSize], r.sr)
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
