package sniff_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
)

func rocePacket(psn uint32, n int) []byte {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.WriteMiddle, PKey: wire.PKeyDefault, DestQP: 0x11, PSN: wire.PSN(psn)}}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(int(psn) + i)
	}
	return wire.AppendPacket(nil, &h, payload)
}

// record is one decoded pcap record.
type record struct {
	id       uint16
	src, dst netip.AddrPort
	payload  []byte
}

// readRecords decodes every record of a pcap file and checks that the ICRC
// trailer of each matches the ICRC computed over the recorded IP and UDP
// headers — that the file shows what a capture on the wire would.
func readRecords(t *testing.T, file []byte) []record {
	t.Helper()
	r, err := sniff.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for {
		p, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		ip, udp, payload, src, dst, ok := sniff.DecodeUDP(p.LinkType, p.Data)
		if !ok {
			t.Fatalf("record %d does not decode", len(out))
		}
		icrc, ok := wire.ICRCFromHeaders(ip, udp, payload[:len(payload)-wire.ICRCSize])
		if !ok || icrc != wire.Trailer(payload) {
			t.Errorf("record %d: ICRC over the recorded headers %#08x, trailer %#08x", len(out), icrc, wire.Trailer(payload))
		}
		var id uint16
		if ip[0]>>4 == 4 {
			id = uint16(ip[4])<<8 | uint16(ip[5])
		}
		out = append(out, record{id, src, dst, bytes.Clone(payload)})
	}
}

func TestWrapInMemory(t *testing.T) {
	var file bytes.Buffer
	rec, err := sniff.NewRecorder(&file)
	if err != nil {
		t.Fatal(err)
	}
	addrA := netip.MustParseAddrPort("10.0.0.1:4791")
	addrB := netip.MustParseAddrPort("10.0.0.2:4791")
	nw := transporttest.NewNetwork(1)
	defer nw.Close()
	a := sniff.Wrap(nw.Attach(addrA), rec)
	b := sniff.Wrap(nw.Attach(addrB), rec)
	out := []transport.Message{
		{Buf: rocePacket(1, 4096), Addr: addrB},
		{Buf: rocePacket(2, 100), Addr: addrB},
		{Buf: rocePacket(3, 0), Addr: addrB},
	}
	if n, err := a.WriteBatch(out); n != 3 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := make([]transport.Message, 8)
	if n, err := b.ReadBatch(in); n != 3 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	recs := readRecords(t, file.Bytes())
	if len(recs) != 6 {
		t.Fatalf("%d records, want 3 sent + 3 received", len(recs))
	}
	for i, r := range recs {
		want := out[i%3].Buf
		if r.src != addrA || r.dst != addrB || r.id != 0 || !bytes.Equal(r.payload, want) {
			t.Errorf("record %d: %v -> %v ID %d, %d bytes; want %v -> %v ID 0, %d bytes",
				i, r.src, r.dst, r.id, len(r.payload), addrA, addrB, len(want))
		}
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestWrapUDPGSO records a GSO batch sent by the UDP endpoint: segment k
// shows IP ID k, and its ICRC matches the recorded header.
func TestWrapUDPGSO(t *testing.T) {
	// Addresses other than transport's own tests', which may run at the
	// same time.
	addrA := netip.MustParseAddrPort("127.0.0.5:4791")
	addrB := netip.MustParseAddrPort("127.0.0.6:4791")
	var file bytes.Buffer
	rec, err := sniff.NewRecorder(&file)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := transport.Open(addrA, nil)
	if err != nil {
		t.Skipf("no loopback UDP endpoint: %v", err)
	}
	a := sniff.Wrap(ca, rec)
	defer a.Close()
	b, err := transport.Open(addrB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	off, ok := transport.OffloadsOf(a)
	if !ok {
		t.Fatal("OffloadsOf does not see through Wrap")
	}
	var out []transport.Message
	for i := range 5 {
		out = append(out, transport.Message{Buf: rocePacket(uint32(i), 1024), Addr: addrB})
	}
	out = append(out, transport.Message{Buf: rocePacket(9, 10), Addr: addrB})
	if n, err := a.WriteBatch(out); n != len(out) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	wantIDs := []uint16{0, 1, 2, 3, 4, 5}
	if !off.GSO {
		t.Logf("GSO off (%v): every ID is 0", off.GSOError)
		wantIDs = make([]uint16, 6)
	}
	recs := readRecords(t, file.Bytes())
	if len(recs) != len(out) {
		t.Fatalf("%d records, want %d", len(recs), len(out))
	}
	for i, r := range recs {
		if r.id != wantIDs[i] || !bytes.Equal(r.payload, out[i].Buf) || r.src != addrA || r.dst != addrB {
			t.Errorf("record %d: ID %d, want %d", i, r.id, wantIDs[i])
		}
	}
	// The receiver sees the same packets and recovers the same IDs.
	in := make([]transport.Message, 8)
	for got := 0; got < len(out); {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:n] {
			if m.IPID != wantIDs[got] {
				t.Errorf("received packet %d: IPID %d, want %d", got, m.IPID, wantIDs[got])
			}
			got++
		}
	}
}

// failAfter accepts n writes, then fails.
type failAfter struct{ n int }

var errDisk = errors.New("disk full")

func (w *failAfter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errDisk
	}
	w.n--
	return len(p), nil
}

func TestWrapRecordError(t *testing.T) {
	rec, err := sniff.NewRecorder(&failAfter{n: 1}) // the file header only
	if err != nil {
		t.Fatal(err)
	}
	nw := transporttest.NewNetwork(1)
	defer nw.Close()
	addrB := netip.MustParseAddrPort("10.0.0.2:4791")
	a := sniff.Wrap(nw.Attach(netip.MustParseAddrPort("10.0.0.1:4791")), rec)
	nw.Attach(addrB)
	if n, err := a.WriteBatch([]transport.Message{{Buf: rocePacket(1, 10), Addr: addrB}}); n != 1 || err != nil {
		t.Errorf("WriteBatch = %d, %v; a recording error must not fail it", n, err)
	}
	if err := a.Close(); !errors.Is(err, errDisk) {
		t.Errorf("Close = %v, want the recording error", err)
	}
}
