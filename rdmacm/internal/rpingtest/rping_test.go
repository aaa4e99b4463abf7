package rpingtest

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/verbs"
)

// TestLoopback runs the rping client against the rping server over UDP on
// loopback.
func TestLoopback(t *testing.T) {
	var vctx [2]*verbs.Context
	for i := range vctx {
		var c *verbs.Context
		var err error
		for range 20 { // a random address: other test binaries use 127.77.x.x
			a := netip.AddrFrom4([4]byte{127, 99, byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
			if c, err = verbs.NewContext(&verbs.Options{Addr: a}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		vctx[i] = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Server(ctx, vctx[1], vctx[1].LocalAddr().Addr(), Options{Verbose: true, Out: &sout}, func() { close(ready) })
	}()
	<-ready
	if err := Client(ctx, vctx[0], vctx[1].LocalAddr().Addr(), Options{Count: 10, Verbose: true, Out: &cout}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(cout.String()), "\n")
	if len(lines) != 10 || lines[0] != "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr" {
		t.Fatalf("client output:\n%s", cout.String())
	}
	if !strings.HasPrefix(sout.String(), "server ping data: rdma-ping-0: ABC") || strings.Count(sout.String(), "\n") != 10 {
		t.Fatalf("server output:\n%s", sout.String())
	}
}

func TestFill(t *testing.T) {
	b := make([]byte, 64)
	fill(b, 0)
	if got := cstr(b); got != "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr" {
		t.Fatalf("%q", got)
	}
}
