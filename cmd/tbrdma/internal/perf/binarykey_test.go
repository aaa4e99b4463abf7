package perf

import (
	"bytes"
	"encoding/hex"
	"slices"
	"testing"
)

// Key messages of perftest 4.5's rdma_cm mode as a real ib_write_bw -R
// client sent them (testdata/rxe/write_bw_rdma_cm.pcap, RC SEND Only on
// the comm QP, frames 31 and 152): the same description twice, the second
// time with garbage in the padding after rkey.
const (
	cmKeyFrame31  = "00000000000000010000001200c0cc19000003830000000000007f9d3869e00000000000000000000000ffffc61200020000000000000001"
	cmKeyFrame152 = "00000000000000010000001200c0cc1900000383a155000000007f9d3869e00000000000000000000000ffffc61200020000000000000001"
)

func TestBinaryKeyMatchesCapture(t *testing.T) {
	want := Dest{OutReads: 1, QPN: 0x12, PSN: 0xc0cc19, RKey: 0x383, VAddr: 0x7f9d3869e000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 2}, GIDIndex: 1}
	for _, h := range []string{cmKeyFrame31, cmKeyFrame152} {
		b, _ := hex.DecodeString(h)
		if len(b) != BinaryKeyLen {
			t.Fatalf("capture key is %d bytes, BinaryKeyLen %d", len(b), BinaryKeyLen)
		}
		d, err := ParseBinaryKey(b)
		if err != nil {
			t.Fatal(err)
		}
		if d != want {
			t.Errorf("parsed %+v, want %+v", d, want)
		}
	}
	// ib_write_bw printed it as " local address: LID 0000 QPN 0x0012 PSN 0xc0cc19" (write_bw_rdma_cm.client.txt).
	b31, _ := hex.DecodeString(cmKeyFrame31)
	if got := want.MarshalBinaryKey(); !bytes.Equal(got, b31) {
		t.Errorf("marshal:\n%x\nwant\n%x", got, b31)
	}
	// The zeroed descriptions around the test QP's connection (frame 20).
	if got := (Dest{}).MarshalBinaryKey(); !bytes.Equal(got, make([]byte, BinaryKeyLen)) {
		t.Errorf("zero key %x", got)
	}
}

func TestParseBinaryKeyRejects(t *testing.T) {
	good, _ := hex.DecodeString(cmKeyFrame31)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"short":     good[:55],
		"long":      append(append([]byte(nil), good...), 0, 0, 0, 0, 0, 0, 0, 0), // perftest ≥ 6.x adds tail_markers_vaddr
		"qpn":       func() []byte { c := bytes.Clone(good); c[8] = 1; return c }(),
		"psn":       func() []byte { c := bytes.Clone(good); c[12] = 1; return c }(),
		"lid":       func() []byte { c := bytes.Clone(good); c[1] = 1; return c }(),
		"out_reads": func() []byte { c := bytes.Clone(good); c[5] = 1; return c }(),
	} {
		if d, err := ParseBinaryKey(b); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, d)
		}
	}
}

// fakeMsgConn is a MsgConn over two queues.
type fakeMsgConn struct {
	in   [][]byte
	sent [][]byte
}

func (f *fakeMsgConn) Send(b []byte) error { f.sent = append(f.sent, bytes.Clone(b)); return nil }
func (f *fakeMsgConn) Recv() ([]byte, error) {
	m := f.in[0]
	f.in = f.in[1:]
	return m, nil
}

func TestMsgCommSizes(t *testing.T) {
	key, _ := hex.DecodeString(cmKeyFrame31)
	// A client: sends first; the server's answer is one message each.
	f := &fakeMsgConn{in: [][]byte{[]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), {0, 0, 16, 0}, {0, 0, 0, 64}, {'5', 0}, key, key}}
	c := NewMsgComm(f, false)
	if v, err := c.ExchangeVersions(); err != nil || v != "6.06" {
		t.Fatalf("versions: %q %v", v, err)
	}
	if p, l, err := c.ExchangeSysData(4096, 64); err != nil || p != 4096 || l != 64 {
		t.Fatalf("sysdata: %d %d %v", p, l, err)
	}
	if m, err := c.ExchangeMTU(3); err != nil || m != 3 {
		t.Fatalf("mtu: %d %v", m, err)
	}
	rem, err := c.HandShake(Dest{QPN: 5})
	if err != nil || rem.QPN != 0x12 {
		t.Fatalf("handshake: %+v %v", rem, err)
	}
	if err := c.Close(Dest{}); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, m := range f.sent {
		sizes = append(sizes, len(m))
	}
	// No "done" after the closing key, unlike TCP.
	if want := []int{16, 4, 4, 2, 56, 56}; !slices.Equal(sizes, want) {
		t.Errorf("sent sizes %v, want %v", sizes, want)
	}
	// A message of the wrong size is an error, not a desynchronised stream.
	f = &fakeMsgConn{in: [][]byte{make([]byte, 64)}}
	if _, err := NewMsgComm(f, false).HandShake(Dest{}); err == nil {
		t.Error("a 64-byte key message was accepted")
	}
}
