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
