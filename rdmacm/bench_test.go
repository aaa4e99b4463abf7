package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// BenchmarkConnect measures rdma_cm connections over loopback UDP, one
// after the other: Dial (address and route resolution, REQ, REP, RTU, both
// QPs to RTS) and Accept, then Close on both ends (DREQ, DREP). conns/s is
// the issue 9 figure "rdma_cm connections established per second".
func BenchmarkConnect(b *testing.B) {
	p := newPair(b, true)
	defer p.close()
	l, err := rdmacm.Listen(p.b, netip.AddrPortFrom(netip.IPv4Unspecified(), 7650), nil)
	must(b, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addr := netip.AddrPortFrom(p.b.LocalAddr().Addr(), 7650).String()
	opts := &rdmacm.DialOptions{EndpointOptions: rdmacm.EndpointOptions{
		QP: verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}}}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		c, err := rdmacm.Dial(ctx, p.a, addr, opts)
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		must(b, c.Close())
		<-s.Done()
		must(b, s.Close())
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
}
