// Package wire holds the RoCEv2 wire format as Linux SoftRoCE (rdma_rxe)
// speaks it: the InfiniBand Base Transport Header and its extension
// headers, the RC/UC/UD opcode table, the MAD common header that carries
// connection management on QP1, and the invariant CRC (ICRC) that closes
// every RoCEv2 packet.
//
// Header types are views over []byte (type BTH []byte, type RETH []byte, …):
// each has named accessors, a size constant and a Fields struct whose
// Append method encodes it. Parsers never allocate and never panic: a short
// or inconsistent input returns an error (ErrShortPacket wraps
// io.ErrUnexpectedEOF; every *ParseError carries a Reason that a counter can
// name).
//
// Numbers on the wire are big-endian, with one exception: the 4-byte ICRC
// trailer is little-endian. The ICRC covers most of the IP and UDP headers
// (see ICRC and RecoverIPv4ID) — the trap that makes a user-space RoCEv2
// endpoint hard — and docs/wire-format.md explains it.
//
// References: InfiniBand Architecture Specification vol. 1, ch. 9 (transport
// headers) and ch. 13 (MADs); Annex A17 (RoCEv2: UDP port 4791, ICRC masks).
package wire
