package sniff

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"testing"
	"time"
)

// FuzzReader feeds arbitrary bytes to the Reader and every packet it yields
// to DecodeUDP under each link type. Neither may panic; every decoded
// datagram must be consistent with the frame and survive a rebuild with
// AppendUDPFrame. Seeds: testdata/fuzz/FuzzReader/ (slices of the rdma_rxe
// captures and synthetic files in each byte order) plus the ones below.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	rec, err := NewRecorder(&buf)
	if err != nil {
		f.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	_ = rec.Record(ts, netip.MustParseAddrPort("127.0.0.2:49152"), netip.MustParseAddrPort("127.0.0.3:4791"), 1, []byte("roce"))
	_ = rec.Record(ts, netip.MustParseAddrPort("[fd00::2]:49152"), netip.MustParseAddrPort("[fd00::3]:4791"), 0, []byte("roce"))
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:fileHeaderLen+recordHeaderLen+10])
	f.Add(buildFile(binary.BigEndian, magicNano, LinkTypeLinuxSLL, []byte("not a frame")))

	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for range 64 {
			p, err := r.Next()
			if err != nil {
				if err != io.EOF && len(p.Data) != 0 {
					t.Fatalf("error %v with %d bytes of data", err, len(p.Data))
				}
				return
			}
			if p.LinkType != r.LinkType() {
				t.Fatalf("packet link type %d, file %d", p.LinkType, r.LinkType())
			}
			checkDecode(t, p.LinkType, p.Data)
			for _, lt := range []int{LinkTypeEthernet, LinkTypeRaw, LinkTypeLinuxSLL} {
				checkDecode(t, lt, p.Data)
			}
		}
	})
}

func checkDecode(t *testing.T, linktype int, frame []byte) {
	ip, udp, payload, src, dst, ok := DecodeUDP(linktype, frame)
	if !ok {
		if ip != nil || udp != nil || payload != nil || src.IsValid() || dst.IsValid() {
			t.Fatalf("link type %d: rejected frame but returned values", linktype)
		}
		return
	}
	if len(udp) != udpHeaderLen || (len(ip) < ipv4HeaderLen) || len(ip)+len(udp)+len(payload) > len(frame) {
		t.Fatalf("link type %d: ip %d, udp %d, payload %d bytes from a %d-byte frame",
			linktype, len(ip), len(udp), len(payload), len(frame))
	}
	if binary.BigEndian.Uint16(udp[0:]) != src.Port() || binary.BigEndian.Uint16(udp[2:]) != dst.Port() ||
		int(binary.BigEndian.Uint16(udp[4:])) != udpHeaderLen+len(payload) {
		t.Fatalf("link type %d: UDP header % x does not match %v -> %v, %d-byte payload",
			linktype, udp, src, dst, len(payload))
	}
	var id uint16
	if ip[0]>>4 == 4 {
		id = binary.BigEndian.Uint16(ip[4:])
	}
	re := AppendUDPFrame(nil, src, dst, id, payload)
	_, _, payload2, src2, dst2, ok := DecodeUDP(LinkTypeRaw, re)
	if !ok || !bytes.Equal(payload, payload2) ||
		netip.AddrPortFrom(src.Addr().Unmap(), src.Port()) != netip.AddrPortFrom(src2.Addr().Unmap(), src2.Port()) ||
		netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()) != netip.AddrPortFrom(dst2.Addr().Unmap(), dst2.Port()) {
		t.Fatalf("link type %d: rebuilt frame decodes as %v: %v -> %v %q, want %v -> %v %q",
			linktype, ok, src2, dst2, payload2, src, dst, payload)
	}
}
