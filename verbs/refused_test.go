package verbs_test

import (
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

// refusingConn refuses, as the kernel does a datagram that an output
// firewall rule drops (EPERM), the packet with request PSN psn the first
// limit times it is handed over: the messages before it are sent, and
// WriteBatch returns their count and a *transport.RefusedError.
type refusingConn struct {
	transport.Conn
	mu       sync.Mutex
	psn      wire.PSN
	limit    int
	attempts int
}

func (c *refusingConn) WriteBatch(msgs []transport.Message) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range msgs {
		b := msgs[i].Buf
		if len(b) < wire.BTHSize || wire.BTH(b[:wire.BTHSize]).PSN() != c.psn || !wire.BTH(b[:wire.BTHSize]).Opcode().Has(wire.IsRequest) {
			continue
		}
		if c.attempts >= c.limit {
			break
		}
		c.attempts++
		n, err := c.Conn.WriteBatch(msgs[:i])
		if err != nil {
			return n, err
		}
		return i, &transport.RefusedError{Packets: 1, Err: syscall.EPERM}
	}
	return c.Conn.WriteBatch(msgs)
}

// A datagram the system refuses is sent again at once, so a refusal now
// and then costs no retransmission by the engine; one refused again and
// again is given up after refusedTries, lost as on a link, and the
// engine's recovery resends it. Either way the packets after it in the
// batch go, and the WRITE completes with every byte. Fake clock.
func TestRefusedDatagram(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   int  // refusals of the packet
		resends bool // the engine must resend it (the context gave it up)
	}{
		{"refused once", 1, false},
		{"refused until given up", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := transporttest.NewNetwork(3)
				defer n.Close()
				rc := &refusingConn{Conn: n.Attach(netip.MustParseAddrPort("198.18.7.1:4791")), limit: tc.limit}
				b := n.Attach(netip.MustParseAddrPort("198.18.7.2:4791"))
				o := srOptions()
				o.Conns = [2]transport.Conn{rc, b}
				p := verbstest.NewPair(t, o)
				rc.mu.Lock()
				rc.psn = p.A.QP.Query().SQPSN.Add(50) // a packet inside the WRITE
				rc.mu.Unlock()
				srWrite(t, p, 200<<10)
				c := p.A.Ctx.Counters()
				rc.mu.Lock()
				refusals := rc.attempts
				rc.mu.Unlock()
				if refusals == 0 {
					t.Fatal("nothing was refused: the case was not exercised")
				}
				if got := c.Retransmits > 0; got != tc.resends {
					t.Errorf("%d refusals, %d packets resent by the engine: want resends %v", refusals, c.Retransmits, tc.resends)
				}
				p.A.Ctx.Close()
				p.B.Ctx.Close()
			})
		})
	}
}
