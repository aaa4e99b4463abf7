package hooks_test

import (
	"io"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/verbs"
)

// The endpoint controls reach a UDP endpoint, also through a wrapper
// (sniff's), except the inline reader, which would bypass the wrapper.
func TestEndpointControls(t *testing.T) {
	c, err := transport.Open(netip.MustParseAddrPort("127.0.77.1:4791"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec, err := sniff.NewRecorder(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := sniff.Wrap(c, rec)
	for _, tc := range []struct {
		name   string
		c      transport.Conn
		inline bool
	}{{"endpoint", c, runtime.GOOS == "linux"}, {"wrapped", wrapped, false}} {
		if n, ok := hooks.MaxPacketSizeOf(tc.c); !ok || n < transport.DefaultMaxPacketSize {
			t.Errorf("%s: MaxPacketSizeOf = %d, %v; want at least %d, true", tc.name, n, ok, transport.DefaultMaxPacketSize)
		}
		if !hooks.SetBusyPollOf(tc.c, time.Millisecond) || !hooks.SetBusyPollOf(tc.c, 0) {
			t.Errorf("%s: SetBusyPollOf reported false", tc.name)
		}
		hooks.HoldBusyPollOf(tc.c, 1)
		hooks.HoldBusyPollOf(tc.c, -1)
		for _, d := range []time.Duration{time.Millisecond, 0} {
			if ok, err := hooks.SetKernelWaitOf(tc.c, d); !ok || err != nil {
				t.Errorf("%s: SetKernelWaitOf(%v) = %v, %v; want true, nil", tc.name, d, ok, err)
			}
		}
		if r, ok := hooks.InlineReaderOf(tc.c); ok != tc.inline || (r != nil) != ok {
			t.Errorf("%s: InlineReaderOf = %v, %v; want ok %v", tc.name, r, ok, tc.inline)
		}
	}
}

// A Conn that is not a UDP endpoint (an in-memory link, or none) has none
// of the controls.
func TestEndpointControlsElsewhere(t *testing.T) {
	n := transporttest.NewNetwork(1)
	defer n.Close()
	mem := n.Attach(netip.MustParseAddrPort("198.18.77.1:4791"))
	for _, c := range []transport.Conn{mem, nil} {
		if _, ok := hooks.MaxPacketSizeOf(c); ok {
			t.Errorf("MaxPacketSizeOf(%T) reported true", c)
		}
		if hooks.SetBusyPollOf(c, time.Second) {
			t.Errorf("SetBusyPollOf(%T) reported true", c)
		}
		hooks.HoldBusyPollOf(c, 1) // a no-op
		if ok, err := hooks.SetKernelWaitOf(c, time.Second); ok || err != nil {
			t.Errorf("SetKernelWaitOf(%T) = %v, %v; want false, nil", c, ok, err)
		}
		if _, ok := hooks.InlineReaderOf(c); ok {
			t.Errorf("InlineReaderOf(%T) reported true", c)
		}
	}
}

// Of reaches a verbs.Context's hooks: one GSI per context, and CM counters
// that Counters reports each under its own name.
func TestOfContext(t *testing.T) {
	n := transporttest.NewNetwork(1)
	defer n.Close()
	ctx, err := verbs.NewContext(&verbs.Options{Conn: n.Attach(netip.MustParseAddrPort("198.18.77.2:4791"))})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	e := hooks.Of(ctx)
	if e.GSI() != e.GSI() || hooks.Of(ctx).GSI() != e.GSI() {
		t.Error("GSI returned different QP1s for one context")
	}
	if e.SetBusyPoll(time.Millisecond) {
		t.Error("SetBusyPoll on an in-memory link reported true")
	}
	cm := e.CM()
	cm.Retries.Add(1)
	cm.RejectsLimit.Add(2)
	cm.AuthFailures.Add(3)
	cm.HalfOpenExpired.Add(4)
	want := [verbs.NumCMCounters]uint64{verbs.CMRetries: 1, verbs.CMRejectsLimit: 2, verbs.CMAuthFailures: 3, verbs.CMHalfOpenExpired: 4}
	if got := ctx.Counters().CM; got != want {
		t.Errorf("Counters().CM = %v, want %v", got, want)
	}
}

// Of with anything but a *verbs.Context panics, naming both types.
func TestOfWrongType(t *testing.T) {
	defer func() {
		r := recover()
		s, _ := r.(string)
		if !strings.Contains(s, "Of(int)") || !strings.Contains(s, "*verbs.Context") {
			t.Errorf("recovered %v, want a panic naming int and *verbs.Context", r)
		}
	}()
	hooks.Of(42)
}
