package stream_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/stream"
)

// A server on 127.0.119.1 port 7400 upper-cases what a client sends it;
// the client half-closes, and reads the answer to its end.
func ExampleListen() {
	l, err := stream.Listen("127.0.119.1:7400")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // to the client's CloseWrite
		for i, x := range b {
			if 'a' <= x && x <= 'z' {
				b[i] = x - 'a' + 'A'
			}
		}
		c.Write(b)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := stream.Dialer{LocalAddr: netip.MustParseAddr("127.0.119.2")}
	c, err := d.Dial(ctx, "127.0.119.1:7400")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println(c.RemoteAddr().Network(), c.RemoteAddr())
	io.WriteString(c, "hello over rdma")
	c.CloseWrite()
	answer, err := io.ReadAll(c) // io.EOF once the server closed: length and CRC-32C checked
	fmt.Printf("%s %v\n", answer, err)
	// Output:
	// rdma 127.0.119.1:7400
	// HELLO OVER RDMA <nil>
}
