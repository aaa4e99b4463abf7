package cli

import (
	"bytes"
	"context"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

// TestServerPrintsPickedPort: a one-test server started with -p 0 says on
// stderr which port the kernel picked, and a client given that port runs
// the test against it (both exit 0).
func TestServerPrintsPickedPort(t *testing.T) {
	for _, c := range []struct {
		name, kind string
		args       []string
	}{
		{"pingpong", "TCP", []string{"pingpong", "-n", "5", "-s", "64"}},
		{"pingpong --ud", "TCP", []string{"pingpong", "--ud", "-n", "5", "-s", "64"}},
		{"write-bw", "TCP", []string{"write-bw", "-n", "5", "-s", "4096"}},
		{"read-lat -R", "rdma_cm", []string{"read-lat", "-R", "-n", "5", "-s", "64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa, ca := loopbackAddr(), loopbackAddr()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			serr := newLockedBuffer("listening on")
			sf := &Factory{IO: &ui.IO{In: new(bytes.Buffer), Out: newLockedBuffer("\x00"), ErrOut: serr}, Now: time.Now, OpenDevice: func(a netip.Addr) (*verbs.Context, error) { return openDevice(a, nil) }}
			done := make(chan int, 1)
			go func() { done <- run(ctx, sf, append(append([]string{}, c.args...), "--bind", sa.String(), "-p", "0")) }()
			select {
			case <-serr.ready:
			case code := <-done:
				t.Fatalf("server exit %d before listening:\n%s", code, serr)
			case <-ctx.Done():
				t.Fatalf("server did not say where it listens:\n%s", serr)
			}
			re := regexp.MustCompile(`tbrdma ` + regexp.QuoteMeta(c.args[0]) + `: listening on ` + regexp.QuoteMeta(sa.String()) + ` port ([0-9]+) \(` + c.kind + `\)` + "\n")
			m := re.FindStringSubmatch(serr.String())
			if m == nil {
				t.Fatalf("server stderr %q lacks %q", serr, re)
			}
			port, _ := strconv.Atoi(m[1])
			if port == 0 {
				t.Fatalf("server says port 0: %q", serr)
			}
			cf, cout, cerr := testFactory()
			if code := run(ctx, cf, append(append([]string{}, c.args...), "--bind", ca.String(), "-p", m[1], sa.String())); code != ExitOK {
				t.Fatalf("client on port %d: exit %d\n%s%s", port, code, cout, cerr)
			}
			if code := <-done; code != ExitOK {
				t.Fatalf("server: exit %d\n%s", code, serr)
			}
		})
	}
}
