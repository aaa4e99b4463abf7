package rdmacm_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// TestSetACKTimeout: rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT), which
// perftest 24.10 and later sets to its --qp-timeout on -R connections.
// Without it both QPs get the timeout the CM derives; with it the QP of
// that side gets the value at RTS, through CreateQP's QP (the connection
// moves it) and through InitQPAttr; an ID made from a request takes its
// listener's.
func TestSetACKTimeout(t *testing.T) {
	p := newPair(t, false)
	defer p.close()
	for i, c := range []struct {
		client, listener int // -1: not set
		wantC, wantS     uint8
	}{
		{-1, -1, 19, 19},
		{14, -1, 14, 19},
		{-1, 12, 19, 12},
		{14, 16, 14, 16},
	} {
		t.Run(fmt.Sprintf("client %d listener %d", c.client, c.listener), func(t *testing.T) {
			port := uint16(7600 + i)
			sch, _ := rdmacm.CreateEventChannel(nil)
			defer sch.Destroy()
			cch, _ := rdmacm.CreateEventChannel(nil)
			defer cch.Destroy()
			ln, err := sch.CreateID(p.b, rdmacm.PSTCP)
			must(t, err)
			defer ln.Destroy()
			if c.listener >= 0 {
				must(t, ln.SetACKTimeout(uint8(c.listener)))
			}
			must(t, ln.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
			must(t, ln.Listen(4))
			cid, err := cch.CreateID(p.a, rdmacm.PSTCP)
			must(t, err)
			defer cid.Destroy()
			if c.client >= 0 {
				must(t, cid.SetACKTimeout(uint8(c.client)))
			}
			must(t, cid.ResolveAddr(fmt.Sprintf("%v:%d", p.b.LocalAddr().Addr(), port), time.Second))
			waitEvent(t, cch, rdmacm.EventAddrResolved)
			must(t, cid.ResolveRoute(time.Second))
			waitEvent(t, cch, rdmacm.EventRouteResolved)
			newEnd(t, cid)
			must(t, cid.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
			req := waitEvent(t, sch, rdmacm.EventConnectRequest)
			defer req.ID.Destroy()
			if a, _, err := req.ID.InitQPAttr(verbs.QPStateRTS); err != nil || a.Timeout != c.wantS {
				t.Errorf("server InitQPAttr(RTS): timeout %d (%v), want %d", a.Timeout, err, c.wantS)
			}
			newEnd(t, req.ID)
			must(t, req.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}))
			waitEvent(t, cch, rdmacm.EventEstablished)
			waitEvent(t, sch, rdmacm.EventEstablished)
			if got := cid.QP().Query().Timeout; got != c.wantC {
				t.Errorf("client QP timeout %d, want %d", got, c.wantC)
			}
			if got := req.ID.QP().Query().Timeout; got != c.wantS {
				t.Errorf("server QP timeout %d, want %d", got, c.wantS)
			}
			if a, _, err := cid.InitQPAttr(verbs.QPStateRTS); err != nil || a.Timeout != c.wantC {
				t.Errorf("client InitQPAttr(RTS): timeout %d (%v), want %d", a.Timeout, err, c.wantC)
			}
		})
	}
	ch, _ := rdmacm.CreateEventChannel(nil)
	defer ch.Destroy()
	id, err := ch.CreateID(p.a, rdmacm.PSTCP)
	must(t, err)
	defer id.Destroy()
	if err := id.SetACKTimeout(32); !errors.Is(err, rdmacm.ErrInvalidArgument) {
		t.Errorf("SetACKTimeout(32): %v, want ErrInvalidArgument", err)
	}
}
