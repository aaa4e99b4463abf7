package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// A client and a server on two verbs contexts over loopback UDP: the
// server listens on port 7471, the client connects with private data, the
// server accepts with its own, and the client disconnects.
func Example() {
	serverCtx, _ := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.31")})
	defer serverCtx.Close()
	clientCtx, _ := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.32")})
	defer clientCtx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := func(ch *rdmacm.EventChannel) *rdmacm.Event {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			panic(err)
		}
		return ev
	}
	newQP := func(id *rdmacm.ID) {
		pd, _ := id.VerbsContext().AllocPD()
		cq, _ := id.VerbsContext().CreateCQ(16, nil)
		id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}

	// Server: bind, listen.
	sch, _ := rdmacm.CreateEventChannel(nil)
	defer sch.Destroy()
	listener, _ := sch.CreateID(serverCtx, rdmacm.PSTCP)
	defer listener.Destroy()
	listener.Bind(netip.MustParseAddrPort("0.0.0.0:7471"))
	listener.Listen(8)

	// Client: resolve, create the QP, connect.
	cch, _ := rdmacm.CreateEventChannel(nil)
	defer cch.Destroy()
	client, _ := cch.CreateID(clientCtx, rdmacm.PSTCP)
	defer client.Destroy()
	client.ResolveAddr("127.0.71.31:7471", 2*time.Second)
	fmt.Println("client:", next(cch).Type)
	client.ResolveRoute(2 * time.Second)
	fmt.Println("client:", next(cch).Type, "path MTU", client.PathMTU())
	newQP(client)
	client.Connect(&rdmacm.ConnParam{PrivateData: []byte("hi"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})

	// Server: accept the request.
	req := next(sch)
	fmt.Printf("server: %v %q\n", req.Type, req.PrivateData()[:2])
	conn := req.ID
	defer conn.Destroy()
	newQP(conn)
	conn.Accept(&rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})

	est := next(cch)
	fmt.Printf("client: %v %q, QP %v\n", est.Type, est.PrivateData()[:7], client.QP().State())
	fmt.Println("server:", next(sch).Type)

	client.Disconnect()
	fmt.Println("server:", next(sch).Type)
	conn.Disconnect()
	fmt.Println("client:", next(cch).Type)
	// Output:
	// client: ADDR_RESOLVED
	// client: ROUTE_RESOLVED path MTU 4096
	// server: CONNECT_REQUEST "hi"
	// client: ESTABLISHED "welcome", QP RTS
	// server: ESTABLISHED
	// server: DISCONNECTED
	// client: DISCONNECTED
}

// Dial and Listen: the server accepts one connection and echoes one
// message; Close disconnects.
func ExampleDial() {
	serverCtx, _ := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.33")})
	defer serverCtx.Close()
	clientCtx, _ := verbs.NewContext(&verbs.Options{Addr: netip.MustParseAddr("127.0.71.34")})
	defer clientCtx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := rdmacm.Listen(serverCtx, netip.MustParseAddrPort("0.0.0.0:7472"), &rdmacm.ListenOptions{
		Param: func(req *rdmacm.Event) (*rdmacm.ConnParam, error) {
			// RNRRetryCount becomes the client QP's rnr_retry: with 0 a SEND
			// that finds no receive posted yet fails at once.
			return &rdmacm.ConnParam{PrivateData: []byte("welcome"), RNRRetryCount: 7}, nil
		}})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	// The server: accept, receive one message, send it back.
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		conn, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		fmt.Printf("server: connection from %v, private data %q\n", conn.RemoteAddr().Addr(), conn.PrivateData()[:5])
		buf := make([]byte, 64)
		mr, _ := conn.PD().RegMR(buf, verbs.AccessLocalWrite)
		conn.QP().PostRecv(verbs.RecvWR{SGList: []verbs.SGE{mr.SGE(0, 64)}})
		wc := waitCQ(conn.RecvCQ(), verbs.WCRecv)
		conn.QP().PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, int(wc.ByteLen))}})
		waitCQ(conn.SendCQ(), verbs.WCSend)
		<-conn.Done() // the client disconnects
		fmt.Println("server:", conn.Err())
	}()

	conn, err := rdmacm.Dial(ctx, clientCtx, "127.0.71.33:7472", &rdmacm.DialOptions{
		Param: &rdmacm.ConnParam{PrivateData: []byte("hello"), RetryCount: 7, RNRRetryCount: 7}})
	if err != nil {
		panic(err)
	}
	connected := fmt.Sprintf("client: connected to %v, private data %q", conn.RemoteAddr(), conn.PrivateData()[:7])
	buf := make([]byte, 128)
	mr, _ := conn.PD().RegMR(buf, verbs.AccessLocalWrite)
	conn.QP().PostRecv(verbs.RecvWR{SGList: []verbs.SGE{mr.SGE(64, 64)}})
	copy(buf, "ping")
	conn.QP().PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 4)}})
	wc := waitCQ(conn.SendCQ(), verbs.WCSend, verbs.WCRecv) // one CQ serves both queues
	// (The client prints once the echo is back, so that the output does
	// not depend on which side goroutines run first.)
	fmt.Println(connected)
	fmt.Printf("client: echo %q\n", buf[64:64+wc.ByteLen])
	err = conn.Close()
	<-serverDone
	fmt.Println("client: close:", err)
	// Output:
	// server: connection from 127.0.71.34, private data "hello"
	// client: connected to 127.0.71.33:7472, private data "welcome"
	// client: echo "ping"
	// server: rdmacm: connection closed by the peer
	// client: close: <nil>
}

// waitCQ polls cq until it has seen a completion of each opcode, and
// returns the one of the last opcode.
func waitCQ(cq *verbs.CQ, ops ...verbs.WCOpcode) verbs.WC {
	var wc [1]verbs.WC
	var last verbs.WC
	seen := map[verbs.WCOpcode]bool{}
	for len(seen) < len(ops) {
		if n, _ := cq.Poll(wc[:]); n == 1 {
			seen[wc[0].Opcode] = true
			if wc[0].Opcode == ops[len(ops)-1] {
				last = wc[0]
			}
			continue
		}
		time.Sleep(10 * time.Microsecond)
	}
	return last
}
