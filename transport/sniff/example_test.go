package sniff_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/transport/sniff"
)

// A Recorder turns UDP payloads seen on a socket into a pcap file that
// Wireshark decodes; a Reader and DecodeUDP read it back.
func Example() {
	var file bytes.Buffer
	rec, err := sniff.NewRecorder(&file)
	if err != nil {
		panic(err)
	}
	src := netip.MustParseAddrPort("127.0.0.2:49152")
	dst := netip.MustParseAddrPort("127.0.0.3:4791")
	ts := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	if err := rec.Record(ts, src, dst, 0, []byte("BTH...ICRC")); err != nil {
		panic(err)
	}

	r, err := sniff.NewReader(&file)
	if err != nil {
		panic(err)
	}
	p, err := r.Next()
	if err != nil {
		panic(err)
	}
	ip, _, payload, from, to, ok := sniff.DecodeUDP(p.LinkType, p.Data)
	fmt.Println(p.Timestamp.UTC().Format(time.RFC3339Nano), ok, len(ip), from, "->", to, string(payload))
	// Output: 2025-01-02T03:04:05.000006Z true 20 127.0.0.2:49152 -> 127.0.0.3:4791 BTH...ICRC
}
