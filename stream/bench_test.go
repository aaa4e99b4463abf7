package stream_test

import (
	"io"
	"net"
	"testing"

	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/verbs"
)

// copyChunk is what one iteration of BenchmarkCopy moves; run it with
// -benchtime=16x for 1 GiB.
const copyChunk = 64 << 20

// repeater reads buf over and over.
type repeater struct {
	buf []byte
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := copy(p, r.buf[r.off:])
	r.off = (r.off + n) % len(r.buf)
	return n, nil
}

// benchCopy io.Copies b.N × copyChunk bytes from w to r (one stream,
// half-closed at the end) and reports the rate.
func benchCopy(b *testing.B, w, r net.Conn, closeWrite func() error) {
	b.SetBytes(copyChunk)
	src := &repeater{buf: random(1<<20, 9)}
	errc := make(chan error, 1)
	b.ResetTimer()
	go func() {
		_, err := io.Copy(w, io.LimitReader(src, int64(b.N)*copyChunk))
		if err == nil {
			err = closeWrite()
		}
		errc <- err
	}()
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if n != int64(b.N)*copyChunk {
		b.Fatalf("copied %d bytes, want %d", n, int64(b.N)*copyChunk)
	}
}

// BenchmarkCopy compares io.Copy over a stream Conn with io.Copy over a
// TCP connection, both on loopback.
func BenchmarkCopy(b *testing.B) {
	b.Run("stream", func(b *testing.B) {
		c, s := pair(b, nil, nil)
		benchCopy(b, c, s, c.CloseWrite)
	})
	b.Run("stream-seg", func(b *testing.B) {
		c, s := pair(b, &stream.Dialer{SegmentSize: verbs.SegmentSizeLimit}, &stream.ListenConfig{SegmentSize: verbs.SegmentSizeLimit})
		benchCopy(b, c, s, c.CloseWrite)
	})
	b.Run("tcp", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			acc <- c
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s := <-acc
		if s == nil {
			b.Fatal("accept failed")
		}
		defer s.Close()
		benchCopy(b, c, s, c.(*net.TCPConn).CloseWrite)
	})
}
