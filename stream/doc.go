// Package stream is a byte stream over RDMA: a net.Conn (Conn) made of an
// rdma_cm RC connection, in the style of package net — Dial and a Dialer,
// Listen and a ListenConfig, a Listener whose Accept returns net.Conns.
// Addresses are "ip:port" with an rdma_cm port (RDMA_PS_TCP); their
// net.Addr is an Addr whose Network is "rdma".
//
// Data moves by RDMA WRITE WITH IMMEDIATE straight into the peer's
// registered receive ring; Conn's ReadFrom reads into the registered send
// slot and its WriteTo writes from the receive ring, so io.Copy to or
// from a Conn makes no copy of its own. Each end's FIN carries the byte
// count and CRC-32C of its direction, and Read returns io.EOF only when
// they match what arrived. An idle connection probes its peer with a
// zero-length RDMA WRITE every second, so a peer that dies or a link that
// goes down makes blocked Reads and Writes fail (after the transport's
// retries, tens of seconds) instead of hanging.
//
// Both ends use tbrdma's large-segment extension (packets of up to 60 KiB)
// by default when the link carries them (loopback, Thunderbolt) and
// neither has a PSK; SegmentSize: NoSegments keeps the path MTU.
//
// The end-to-end check is a CRC-32C, which the CPU computes at many GB/s:
// it catches a lost, repeated or misplaced chunk, which is what it is for
// (each packet's ICRC already covers the wire). It is not a MAC: a
// pre-shared key (Dialer.PSK) authenticates the connection's setup, and an
// application that needs a cryptographic digest of what it moved, as
// tbrdma cat prints, computes one itself.
//
// Without a Device, a Dialer or ListenConfig opens a verbs context on the
// local address (UDP port 4791 of that address, which rdma_rxe must not
// hold), shared by the package's users of that address.
//
// # Wire protocol ("tbs2", and "tbs1")
//
// Both directions are alike; each end has a receive ring of slots × slot
// size bytes, registered REMOTE_WRITE, and as many send slots as the
// peer's ring has.
//
//  1. The dialer connects (RDMA_PS_TCP) with its ring in the REQ's
//     private data: "tbs2", ring address (u64), rkey (u32), slot size
//     (u32, at most 2^24-1), slots (u32, at most 256), big-endian, 24
//     bytes (they fit with a pre-shared key). The listener answers with
//     its own ring, in the same form, in the REP. The magic is the
//     version: "tbs2" is "tbs1" on QPs that both do selective
//     retransmission (verbs.QP.SetSelectiveRetransmit), which each end
//     turns on before its QP can receive. The listener answers in the
//     dialer's version: an older dialer's "tbs1" gets "tbs1", without
//     the extension. A request without either magic is rejected ("not a
//     stream dialer"), and so is a "tbs2" request by a listener from
//     before "tbs2": such a listener needs a dialer of its version.
//  2. Chunk seq (from 0, per direction) goes by RDMA WRITE WITH IMMEDIATE
//     into slot seq % slots of the peer's ring; the immediate is
//     (seq & 0xff) << 24 | length; the receive WQE it consumes tells the
//     peer the slot is full. Chunks are never empty.
//  3. Once its reader has consumed chunks, an end returns their slots by
//     a SEND of a credit holding the number of chunks consumed so far; a
//     writer has at most slots chunks unconsumed.
//  4. CloseWrite (and Close, unless CloseWrite came first) SENDs a FIN:
//     byte count, chunk count and CRC-32C of that direction. The reader,
//     having consumed every chunk, compares and SENDs an ACK: status (0
//     match, 1 mismatch), its counts and CRC-32C. A match is io.EOF to
//     the reader, a mismatch an error.
//  5. Close waits for its writes and FIN to be acknowledged by the
//     peer's RC transport, then disconnects (DREQ). A connection that
//     ends without a FIN is an error to the reader (ErrPeerClosed):
//     Abort is Close without the FIN, for a writer whose stream was cut
//     short.
//  6. After a second without completions an end posts a zero-length RDMA
//     WRITE (no memory touched, no receive consumed): a dead peer fails
//     it with RETRY_EXC_ERR, which fails the connection.
//
// Control messages are inline SENDs of 28 bytes: type (u32: 1 credit, 2
// FIN, 3 ACK), status (u32), chunks (u64), bytes (u64), CRC-32C (u32),
// big-endian. A stream peer is tbrdma, so each end widens its
// QP's send window (verbs.QP.SetSendWindow) to 512 packets; with
// selective retransmission a loss costs the packets lost, not a window.
// docs/wire-format.md has the same description.
package stream
