package rdmacm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// A whole RDMA WRITE + READ program: the server offers a buffer (a
// verbs.RemoteBuffer in its accept's private data), the client writes into
// it and reads it back. Every error is checked.
func Example_writeRead() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.35")})
	check(err)
	defer srv.Close()
	pd, err := srv.AllocPD()
	check(err)
	mem, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	check(err)
	param := rdmacm.DefaultConnParam() // READ resources and retries; ConnParam{} has neither
	param.PrivateData, err = mem.RemoteBuffer().MarshalBinary()
	check(err)
	l, err := rdmacm.Listen(srv, netip.MustParseAddrPort("0.0.0.0:7473"), &rdmacm.ListenOptions{EndpointOptions: rdmacm.EndpointOptions{PD: pd},
		Param: func(*rdmacm.Event) (*rdmacm.ConnParam, error) { return &param, nil }})
	check(err)
	defer l.Close()
	go func() { conn, err := l.Accept(ctx); check(err); <-conn.Done(); conn.Close() }()
	cli, err := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.36")})
	check(err)
	defer cli.Close()
	conn, err := rdmacm.Dial(ctx, cli, "127.0.71.35:7473", nil) // nil: rdmacm.DefaultConnParam
	check(err)
	defer conn.Close()
	var rb verbs.RemoteBuffer
	check(rb.UnmarshalBinary(conn.PrivateData()))
	buf, err := conn.PD().RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	check(err)
	copy(buf.Buf(), "written by the client")
	wcs := make([]verbs.WC, 1)
	for i, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead} {
		_, err = conn.QP().PostSend(verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{buf.SGE(32*i, 21)}, RemoteAddr: rb.Addr, RKey: rb.RKey})
		check(err)
		_, err = conn.SendCQ().Wait(ctx, wcs)
		check(err, wcs[0].Err())
	}
	fmt.Printf("read back: %q\n", buf.Buf()[32:53])
	// Output:
	// read back: "written by the client"
}

// check ends the program at the first error.
func check(errs ...error) {
	for _, err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
}
