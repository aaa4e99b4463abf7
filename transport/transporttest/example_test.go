package transporttest_test

import (
	"fmt"
	"net/netip"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Two endpoints on a network that loses 30% of the packets at random: the
// same packets for the same seed.
func Example() {
	nw := transporttest.NewNetwork(1)
	defer nw.Close()
	nw.SetFaults(transporttest.Faults{Loss: 0.3})
	a := nw.Attach(netip.MustParseAddrPort("10.0.0.1:4791"))
	b := nw.Attach(netip.MustParseAddrPort("10.0.0.2:4791"))

	var out []transport.Message
	for psn := range 10 {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.SendOnly, PKey: wire.PKeyDefault, DestQP: 0x11, PSN: wire.PSN(psn)}}
		out = append(out, transport.Message{Buf: wire.AppendPacket(nil, &h, []byte("hello")), Addr: b.LocalAddr()})
	}
	a.WriteBatch(out)

	in := make([]transport.Message, 16)
	n, _ := b.ReadBatch(in) // delivery without delay is immediate
	for _, m := range in[:n] {
		fmt.Print(wire.BTH(m.Buf).PSN(), ";")
	}
	fmt.Println()
	fmt.Printf("%+v\n", nw.Stats())
	// Output:
	// 0x1;0x6;0x7;0x8;0x9;
	// {Sent:10 Delivered:5 Filtered:0 Lost:5 Duplicated:0 Corrupted:0 Reordered:0 NoRoute:0 Overflow:0}
}
