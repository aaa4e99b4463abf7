package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// serveNoRText is the private data of serve's REJ to a perftest client with
// -R (rdma_cm): serve hosts the TCP-exchange tests only. A tbrdma client
// recognises it (cmConnectError) and says what to run instead; a stock
// client reports a rejected connection.
const serveNoRText = "tbrdma serve: no -R (rdma_cm) tests hosted"

// refuseRClients listens on rdma_cm port port (RDMA_PS_TCP) of every
// device, the port a -R client connects to, and rejects each connection
// request at once (REJ 28, consumer defined, private data serveNoRText)
// with a line on log, until ctx ends. Without it such a client would get
// REJ 8 (no listener), retry it for 3 s and then suggest checking -p.
func refuseRClients(ctx context.Context, devs []*verbs.Context, port uint16, log io.Writer) (done func(), err error) {
	ech, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return nil, err
	}
	var ids []*rdmacm.ID
	closeAll := func() {
		for _, id := range ids {
			id.Destroy()
		}
		ech.Destroy()
	}
	for _, d := range devs {
		id, err := ech.CreateID(d, rdmacm.PSTCP)
		if err != nil {
			closeAll()
			return nil, err
		}
		ids = append(ids, id)
		a := netip.AddrPortFrom(d.LocalAddr().Addr(), port)
		if err := id.Bind(a); err != nil {
			closeAll()
			return nil, fmt.Errorf("rdma_cm port %d on %v, to refuse -R clients: %w", port, a.Addr(), err)
		}
		if err := id.Listen(16); err != nil {
			closeAll()
			return nil, fmt.Errorf("rdma_cm port %d on %v, to refuse -R clients: %w", port, a.Addr(), err)
		}
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			ev, err := ech.GetEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type != rdmacm.EventConnectRequest {
				continue
			}
			peer := ev.ID.RemoteAddr().Addr()
			ev.ID.Reject([]byte(serveNoRText))
			ev.ID.Destroy()
			fmt.Fprintf(log, "tbrdma serve: refused the rdma_cm client %v: it runs a perftest with -R, which serve does not host\n", peer)
		}
	}()
	return func() { closeAll(); <-stopped }, nil
}

// serveRefusedR reports a REJ from refuseRClients.
func serveRefusedR(ev *rdmacm.Event) bool {
	return ev.Type == rdmacm.EventRejected && bytes.HasPrefix(ev.PrivateData(), []byte(serveNoRText))
}
