package transport

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// A datagram the system refuses (here: to a network without a route,
// ENETUNREACH; an nftables rule that drops on output makes UDP report EPERM
// the same way) ends WriteBatch with a *RefusedError that says how many
// messages it carried (a whole GSO run), after sending what came before;
// the messages after it are the caller's to send, and they go.
func TestWriteBatchRefused(t *testing.T) {
	inTunNetns(t, func(tun *os.File) {
		for _, tc := range []struct {
			name    string
			o       Options
			refused int // messages in the refused datagram
		}{
			{"gso", Options{}, 3},
			{"no gso", Options{DisableGSO: true}, 1},
		} {
			c, err := Open(netip.MustParseAddrPort("10.77.0.1:4791"), &tc.o)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			ok, bad := netip.MustParseAddrPort("10.77.0.2:4791"), netip.MustParseAddrPort("198.18.99.1:4791")
			var out []Message
			for i, dst := range []netip.AddrPort{ok, bad, bad, bad, ok, ok} {
				out = append(out, Message{Buf: testPacket(wire.WriteMiddle, uint32(i), 1000), Addr: dst})
			}
			var got []int
			for off := 0; off < len(out); {
				n, err := c.WriteBatch(out[off:])
				for i := range n {
					got = append(got, off+i)
				}
				off += n
				var re *RefusedError
				if errors.As(err, &re) {
					if !errors.Is(err, syscall.ENETUNREACH) || out[off].Addr != bad || re.Packets != tc.refused {
						t.Errorf("%s: at message %d: %v (%d packets), want ENETUNREACH for a datagram of %d to %v", tc.name, off, err, re.Packets, tc.refused, bad)
					}
					off += re.Packets
					continue
				}
				if err != nil {
					t.Errorf("%s: WriteBatch: %v", tc.name, err)
					break
				}
			}
			if len(got) != 3 || got[0] != 0 || got[1] != 4 || got[2] != 5 {
				t.Errorf("%s: WriteBatch sent messages %v, want 0, 4, 5", tc.name, got)
			}
			pkts, err := readIPv4(tun, 3)
			c.Close()
			if err != nil {
				t.Errorf("%s: read tun: %v (got %d packets)", tc.name, err, len(pkts))
				return
			}
			for i, p := range pkts {
				want := []uint32{0, 4, 5}[i]
				if psn := wire.BTH(p[28 : 28+wire.BTHSize]).PSN(); uint32(psn) != want {
					t.Errorf("%s: packet %d on the link has PSN %d, want %d", tc.name, i, psn, want)
				}
			}
		}
	})
}
