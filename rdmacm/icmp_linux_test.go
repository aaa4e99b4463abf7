package rdmacm_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/transport"
)

// nobody is a loopback address with nothing on UDP 4791: the kernel
// answers what is sent there with ICMP port unreachable, which Linux
// reports to the context's socket (IP_RECVERR).
var nobody = netip.MustParseAddr("127.0.71.254")

// TestICMPPortUnreachable: a REQ or SIDR_REQ answered by ICMP port
// unreachable ends in UNREACHABLE with that error (status -ECONNREFUSED),
// not after the 16 REQs of about 98 s; with SetNoListenerRetry the REQ
// goes again within the window and the same error ends it.
func TestICMPPortUnreachable(t *testing.T) {
	check := func(t *testing.T, ev *rdmacm.Event) {
		t.Helper()
		var ue *transport.UnreachableError
		if ev.Status != -int(syscall.ECONNREFUSED) || !errors.Is(ev.Err, syscall.ECONNREFUSED) || !errors.As(ev.Err, &ue) || ue.Dest.Addr() != nobody {
			t.Fatalf("UNREACHABLE status %d, err %v: want -ECONNREFUSED from the ICMP error for %v", ev.Status, ev.Err, nobody)
		}
	}
	for _, retry := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run("rc retry "+retry.String(), func(t *testing.T) {
			vctx := loopbackContext(t)
			defer vctx.Close()
			ch, _ := rdmacm.CreateEventChannel(nil)
			id, _ := ch.CreateID(vctx, rdmacm.PSTCP)
			defer id.Destroy()
			must(t, id.ResolveAddr(netip.AddrPortFrom(nobody, 7174).String(), time.Second))
			waitEvent(t, ch, rdmacm.EventAddrResolved)
			must(t, id.ResolveRoute(time.Second))
			waitEvent(t, ch, rdmacm.EventRouteResolved)
			newEnd(t, id)
			id.SetNoListenerRetry(retry)
			must(t, id.Connect(nil))
			check(t, waitEvent(t, ch, rdmacm.EventUnreachable))
			// One REQ without the window; with it, more (every 50 ms).
			if n := vctx.Counters().MADsOut; retry == 0 && n != 1 || retry != 0 && n < 2 {
				t.Errorf("%d MADs sent with a retry window of %v", n, retry)
			}
		})
	}
	t.Run("sidr", func(t *testing.T) {
		vctx := loopbackContext(t)
		defer vctx.Close()
		ch, id := udClient(t, vctx, netip.AddrPortFrom(nobody, 7174).String())
		defer id.Destroy()
		must(t, id.Connect(nil))
		check(t, waitEvent(t, ch, rdmacm.EventUnreachable))
	})
}
