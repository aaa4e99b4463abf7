// Command streamcopy measures io.Copy over a stream.Conn or a TCP
// connection, for bench/run.sh: "streamcopy serve" accepts one
// connection and copies it to io.Discard; "streamcopy send" dials, copies
// -bytes bytes to it, half-closes and waits for the server's end. The
// sender prints "bytes seconds MB/s".
//
//	streamcopy serve -net rdma|tcp -addr 198.18.2.2:7471
//	streamcopy send -net rdma|tcp -addr 198.18.2.2:7471 -local 198.18.2.1 -bytes 1073741824
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/tbrdma/tbrdma/stream"
	"github.com/tbrdma/tbrdma/verbs"
)

type repeater struct {
	buf []byte
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := copy(p, r.buf[r.off:])
	r.off = (r.off + n) % len(r.buf)
	return n, nil
}

var slots, slotSize int

type halfCloser interface {
	net.Conn
	CloseWrite() error
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "serve" && os.Args[1] != "send" {
		fmt.Fprintln(os.Stderr, "usage: streamcopy serve|send -net rdma|tcp -addr ip:port [-local ip] [-bytes n] [-segments] [-slots n] [-slot-size bytes]")
		os.Exit(2)
	}
	fl := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	network := fl.String("net", "rdma", "rdma or tcp")
	addr := fl.String("addr", "", "server `ip:port`")
	local := fl.String("local", "", "sender's local `ip` (rdma)")
	n := fl.Int64("bytes", 1<<30, "bytes to send")
	seg := fl.Bool("segments", false, "rdma: offer/accept large segments (61440 bytes, as a stream does by default on a link that carries them); without: the path MTU")
	fl.IntVar(&slots, "slots", 0, "rdma: receive ring slots (0: stream.DefaultSlots)")
	fl.IntVar(&slotSize, "slot-size", 0, "rdma: receive ring slot `bytes` (0: stream.DefaultSlotSize)")
	fl.Parse(os.Args[2:])
	segSize := stream.NoSegments // the path MTU, unless -segments
	if *seg {
		segSize = verbs.SegmentSizeLimit
	}
	var err error
	if os.Args[1] == "serve" {
		err = serve(*network, *addr, segSize)
	} else {
		err = send(*network, *addr, *local, *n, segSize)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "streamcopy:", err)
		os.Exit(1)
	}
}

func serve(network, addr string, seg int) error {
	var l net.Listener
	var err error
	if network == "tcp" {
		l, err = net.Listen("tcp", addr)
	} else {
		l, err = (&stream.ListenConfig{SegmentSize: seg, Slots: slots, SlotSize: slotSize}).Listen(context.Background(), addr)
	}
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	got, err := io.Copy(io.Discard, c) // WriteTo on a stream.Conn
	if err != nil {
		return err
	}
	fmt.Println(got)
	return nil
}

func send(network, addr, local string, n int64, seg int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c halfCloser
	if network == "tcp" {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		c = nc.(*net.TCPConn)
	} else {
		var d stream.Dialer
		if local != "" {
			a, err := netip.ParseAddr(local)
			if err != nil {
				return err
			}
			d.LocalAddr = a
		}
		d.SegmentSize, d.Slots, d.SlotSize = seg, slots, slotSize
		sc, err := d.Dial(ctx, addr)
		if err != nil {
			return err
		}
		c = sc
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	if _, err := io.Copy(c, io.LimitReader(&repeater{buf: buf}, n)); err != nil { // ReadFrom
		return err
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	// The server closes once it has read everything: wait for that end.
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	d := time.Since(start).Seconds()
	fmt.Printf("%d %.3f %.1f\n", n, d, float64(n)/d/1e6)
	return nil
}
