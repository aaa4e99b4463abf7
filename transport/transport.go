// Package transport moves RoCEv2 packets over UDP: one endpoint per local
// address on port 4791, batched I/O on Linux (sendmmsg/recvmmsg, UDP GSO and
// GRO where the kernel offers them), a portable path elsewhere, and the
// ICRC computed on send and verified on receive. It knows nothing of queue
// pairs, timers or memory regions; the headers themselves are in package
// wire.
package transport

import (
	"errors"
	"net/netip"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// Message is one RoCEv2 packet: the UDP payload from the BTH through the
// 4-byte ICRC trailer.
type Message struct {
	// Buf holds the packet. On write it is the whole packet including four
	// trailer bytes, which the Conn overwrites with the ICRC. On read it is
	// a view into the Conn's receive buffers, valid until the next ReadBatch.
	Buf []byte
	// Payload, on write to a Conn for which PayloadCapable reports true,
	// is the packet's payload, sent from where it lies (registered memory)
	// instead of being copied into Buf: the packet is then Buf's headers ‖
	// Payload ‖ Buf's last PadCnt+4 bytes (pad and trailer, PadCnt taken
	// from the BTH). Nil on read, and for every other Conn.
	Payload []byte
	// Addr is the remote endpoint: the destination on write, the source on
	// read.
	Addr netip.AddrPort
	// Local is the local address the packet arrived at (read only).
	Local netip.Addr
	// IPID is the IPv4 identification of a received packet, as recovered
	// from its ICRC (read only; 0 for IPv6).
	IPID uint16
}

// Conn is a RoCEv2 datagram endpoint. Implementations are the UDP endpoint
// returned by Open and the in-memory link of package transporttest.
//
// ReadBatch and WriteBatch may be called concurrently with each other but
// each by one goroutine at a time. Close unblocks a pending ReadBatch, which
// then returns an error matching net.ErrClosed.
type Conn interface {
	// ReadBatch blocks until at least one packet has arrived, fills up to
	// len(msgs) entries and returns how many. Packets whose ICRC does not
	// verify, or that are too short to hold a BTH and an ICRC, are dropped
	// and counted, never returned.
	ReadBatch(msgs []Message) (n int, err error)
	// WriteBatch computes each packet's ICRC in place and sends them,
	// returning how many were sent.
	WriteBatch(msgs []Message) (n int, err error)
	// BatchSize is the number of messages one call handles well.
	BatchSize() int
	// LocalAddr is the bound address and port.
	LocalAddr() netip.AddrPort
	// Stats returns a snapshot of the endpoint's counters.
	Stats() Stats
	Close() error
}

// Stats counts what an endpoint did. Drops are indexed by wire.Reason.
type Stats struct {
	PacketsIn, PacketsOut uint64
	BytesIn, BytesOut     uint64
	Drops                 [wire.NumReasons]uint64
	// Syscalls counts read and write system calls (0 for in-memory links).
	ReadCalls, WriteCalls uint64
	// KernelWaits counts receive system calls that slept in the kernel
	// (the kernel wait, internal/hooks.SetKernelWaitOf); KernelWaitSlices
	// those of them that ended after a whole slice without a datagram.
	KernelWaits, KernelWaitSlices uint64
}

// PayloadCapable reports whether c sends Message.Payload (a gathering
// send). Only the UDP endpoint returned by Open does; wrappers (sniff,
// transporttest) are not, so their users build whole packets.
func PayloadCapable(c Conn) bool {
	_, ok := c.(interface{ gathersPayload() })
	return ok
}

// ErrNotSupported is wrapped by errors that report a feature this kernel or
// operating system lacks.
var ErrNotSupported = errors.New("not supported")
