package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/transport/transporttest"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
	"github.com/tbrdma/tbrdma/verbs/verbstest"
)

func TestGSIExchangesMADs(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	ga, gb := hooks.Of(p.A.Ctx).GSI(), hooks.Of(p.B.Ctx).GSI()
	mad := make([]byte, wire.MADSize)
	wire.MADFields{BaseVersion: 1, MgmtClass: wire.MgmtClassCM, ClassVersion: 2, Method: wire.MethodSend,
		TransactionID: 0x1234, AttributeID: 0x10}.Append(mad[:0])
	copy(mad[24:], "a CM REQ body")
	if err := ga.Send(p.B.Ctx.LocalAddr(), mad); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := gb.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.SrcQP != 1 || got.From.Addr() != p.A.Ctx.LocalAddr().Addr() || string(got.MAD[:]) != string(mad) {
		t.Fatalf("received %+v", got)
	}
	m := wire.MAD(got.MAD[:])
	if m.AttributeID() != 0x10 || m.TransactionID() != 0x1234 {
		t.Fatalf("MAD header %+v", m.Fields())
	}
	// A short MAD is refused before it reaches the wire.
	if err := ga.Send(p.B.Ctx.LocalAddr(), mad[:100]); err == nil {
		t.Fatal("a 100-byte MAD was accepted")
	}
	gb.Close()
	if _, err := gb.Recv(ctx); err != verbs.ErrClosed {
		t.Fatalf("Recv after Close: %v", err)
	}
}

// MADs that arrive while the GSI's queue is full are dropped and counted
// (Dropped), and the queued ones are still delivered.
func TestGSIDropsWhenBehind(t *testing.T) {
	p, _ := memPair(t, 1, transporttest.Faults{}, verbstest.Options{}) // loses nothing
	ga, gb := hooks.Of(p.A.Ctx).GSI(), hooks.Of(p.B.Ctx).GSI()
	const queue, extra = 1024, 40 // gsi.go's gsiQueue
	mad := make([]byte, wire.MADSize)
	wire.MADFields{BaseVersion: 1, MgmtClass: wire.MgmtClassCM, ClassVersion: 2, Method: wire.MethodSend,
		AttributeID: 0x10}.Append(mad[:0])
	for range queue + extra {
		if err := ga.Send(p.B.Ctx.LocalAddr(), mad); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); gb.Dropped() < extra; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // a hang guard
			t.Fatalf("Dropped = %d after %d MADs in, want %d", gb.Dropped(), p.B.Ctx.Counters().MADsIn, extra)
		}
	}
	if in := p.B.Ctx.Counters().MADsIn; in != queue+extra || gb.Dropped() != extra {
		t.Fatalf("%d MADs in, %d dropped; want %d and %d", in, gb.Dropped(), queue+extra, extra)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range queue {
		if _, err := gb.Recv(ctx); err != nil {
			t.Fatalf("queued MAD %d: %v", i, err)
		}
	}
}
