// Package cmwire encodes and decodes the InfiniBand communication manager
// (CM) messages that rdma_cm exchanges over QP1, as the Linux kernel CM
// sends them on RoCEv2 (IBTA vol. 1 ch. 12; docs: roce-wire.md §5-§7).
//
// A CM message is a 256-byte MAD in a UD SEND_ONLY packet from QP1 to QP1
// (Q_Key 0x80010000): the 24-byte MAD common header (base version 1, class
// 0x07, class version 2, method Send 0x03, transaction ID, attribute ID)
// and a 232-byte body. [ParseMessage] checks the header and returns a
// [Message] view; the attribute ID selects the body layout:
//
//	attr    message   body layout (byte offsets in the body)              private data
//	0x0010  REQ       comm ID, service ID, CA GUID, Q_Key, QPN, resp.      92 @ 140
//	                  resources, init. depth, timeouts, PSN, retries,
//	                  P_Key, MTU, primary path @52, alternate path @96
//	0x0011  MRA       comm IDs, message MRAed, service timeout            222 @ 10
//	0x0012  REJ       comm IDs, message rejected, ARI length, reason,     148 @ 84
//	                  ARI (72 @ 12)
//	0x0013  REP       comm IDs, Q_Key, QPN, EECN, PSN, resp. resources,   196 @ 36
//	                  init. depth, target ACK delay, RNR retry, CA GUID
//	0x0014  RTU       comm IDs                                            224 @ 8
//	0x0015  DREQ      comm IDs, remote QPN                                220 @ 12
//	0x0016  DREP      comm IDs                                            224 @ 8
//	0x0017  SIDR_REQ  request ID, P_Key, service ID                       216 @ 16
//	0x0018  SIDR_REP  request ID, status, QPN, service ID, Q_Key,         136 @ 96
//	                  ClassPortInfo (72 @ 24)
//
// Each file carries the bit diagram of its messages. All fields are
// big-endian; QPNs, EECNs and PSNs are 24 bits; timeouts are 5-bit
// exponents of 4.096 µs ([Timeout]); retry counts are 3 bits and the path
// MTU a 4-bit code ([MTU]). Private data is always sent full size, zero
// padded: the receiver cannot tell how much the sender supplied.
//
// For an IP-based service ID ([ServiceID], [IsCMAServiceID]) the first 36
// bytes of the REQ or SIDR_REQ private data are the CMA header
// ([ParseCMAHeader]): version 0, IP version, the active side's port and
// both IP addresses. The remaining 56 (REQ) or 180 (SIDR_REQ) bytes are the
// application's.
//
// # Style
//
// As in transport/wire: each message has a view type over []byte (REQ,
// REP, ...) with accessors, a ParseXxx function that checks the length
// and returns (view, n, err), and a XxxFields struct whose Append encodes
// the 232-byte body. Fields structs keep the reserved bits, so every
// accepted input re-encodes to the same bytes. Parsers never panic and
// never allocate; their errors are *[ParseError] values with a [Reason]
// for drop counters, and short input matches wire.ErrShortPacket and
// io.ErrUnexpectedEOF. Views alias the parsed buffer; Fields copy.
//
// Not decoded: ClassPortInfo, LAP and APR ([ReasonAttribute]); the kernel
// CM ignores LAP and APR on RoCE.
package cmwire
