package transport

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// BenchmarkLoopback measures one-way throughput of 4096-byte payloads
// (RC RDMA WRITE MIDDLE packets, 4112-byte datagrams) between two loopback
// addresses: the endpoint with GSO and GRO, the endpoint without them, and,
// as the yardstick, a plain net.UDPConn loop moving the same datagrams one
// per system call with no ICRC work. Compare the three as ratios; the
// absolute numbers depend on the machine.
//
//	go test -run='^$' -bench=Loopback -benchtime=2s -count=3 ./transport/
func BenchmarkLoopback(b *testing.B) {
	b.Run("endpoint-gso-gro", func(b *testing.B) { benchEndpoint(b, &Options{}) })
	b.Run("endpoint-no-offload", func(b *testing.B) { benchEndpoint(b, &Options{DisableGSO: true, DisableGRO: true}) })
	b.Run("raw-udp", benchRaw)
}

const (
	benchPayload = 4096
	benchChunk   = IdealBatchSize // packets per WriteBatch / per credit
	benchWindow  = 4              // chunks in flight: bounded so the receive buffer never overflows
)

func benchEndpoint(b *testing.B, o *Options) {
	tx := open(b, addrA, o)
	rx := open(b, addrB, o)
	if off, ok := OffloadsOf(tx); ok {
		if (!o.DisableGSO && !off.GSO) || (!o.DisableGRO && !off.GRO) {
			b.Skipf("kernel lacks an offload: %v %v", off.GSOError, off.GROError)
		}
	}
	msgs := make([]Message, benchChunk)
	for i := range msgs {
		msgs[i] = Message{Buf: testPacket(wire.WriteMiddle, uint32(i), benchPayload), Addr: addrB}
	}
	in := make([]Message, rx.BatchSize())
	runLoop(b,
		func(n int) error { _, err := tx.WriteBatch(msgs[:n]); return err },
		func() (int, error) { return rx.ReadBatch(in) },
		func() { rx.Close() })
	st, sr := tx.Stats(), rx.Stats()
	b.ReportMetric(float64(st.WriteCalls)/float64(b.N), "writes/op")
	b.ReportMetric(float64(sr.ReadCalls)/float64(b.N), "reads/op")
}

func benchRaw(b *testing.B) {
	tx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addrA))
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addrB))
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	tx.SetWriteBuffer(DefaultSocketBuffer)
	rx.SetReadBuffer(DefaultSocketBuffer)
	pkt := testPacket(wire.WriteMiddle, 1, benchPayload)
	buf := make([]byte, 1<<16)
	runLoop(b,
		func(n int) error {
			for range n {
				if _, err := tx.WriteToUDPAddrPort(pkt, addrB); err != nil {
					return err
				}
			}
			return nil
		},
		func() (int, error) { _, _, err := rx.ReadFromUDPAddrPort(buf); return 1, err },
		func() { rx.Close() })
}

// runLoop sends b.N packets with send (in chunks of benchChunk) while a
// goroutine receives them with recv, with at most benchWindow chunks in
// flight. A chunk whose credit does not come back within 500 ms is taken
// as lost (reported as lost/op) so that a dropped datagram cannot hang the
// benchmark.
func runLoop(b *testing.B, send func(n int) error, recv func() (int, error), closeRecv func()) {
	credits := make(chan struct{}, benchWindow)
	for range benchWindow {
		credits <- struct{}{}
	}
	var got atomic.Int64
	done := make(chan struct{})
	total := int64(b.N)
	go func() {
		defer close(done)
		var n, chunks int64
		for n < total {
			k, err := recv()
			if err != nil {
				return
			}
			n += int64(k)
			got.Store(n)
			for ; (chunks+1)*benchChunk <= n; chunks++ {
				select {
				case credits <- struct{}{}:
				default:
				}
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		timer.Reset(500 * time.Millisecond)
		select {
		case <-credits:
		case <-timer.C:
		}
		n := min(benchChunk, b.N-sent)
		if err := send(n); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	timer.Reset(time.Second)
	select {
	case <-done:
	case <-timer.C:
	}
	b.StopTimer()
	closeRecv()
	<-done
	b.ReportMetric(float64(total-got.Load())/float64(b.N), "lost/op")
}
