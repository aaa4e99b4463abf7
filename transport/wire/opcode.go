package wire

// Opcodes (IBTA vol. 1 §9.2, table 38; rxe_opcode.c). Bits 7..5 are the
// transport class, bits 4..0 the operation.

import "strconv"

// Opcode is the BTH OpCode field.
type Opcode uint8

// Transport classes (top three bits of an Opcode).
const (
	ClassRC Opcode = 0x00
	ClassUC Opcode = 0x20
	ClassRD Opcode = 0x40
	ClassUD Opcode = 0x60
)

// The RC opcodes. UC uses the same operations (0x00-0x0B) with ClassUC set;
// UD has only SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE.
const (
	SendFirst          Opcode = 0x00
	SendMiddle         Opcode = 0x01
	SendLast           Opcode = 0x02
	SendLastImm        Opcode = 0x03
	SendOnly           Opcode = 0x04
	SendOnlyImm        Opcode = 0x05
	WriteFirst         Opcode = 0x06
	WriteMiddle        Opcode = 0x07
	WriteLast          Opcode = 0x08
	WriteLastImm       Opcode = 0x09
	WriteOnly          Opcode = 0x0A
	WriteOnlyImm       Opcode = 0x0B
	ReadRequest        Opcode = 0x0C
	ReadResponseFirst  Opcode = 0x0D
	ReadResponseMiddle Opcode = 0x0E
	ReadResponseLast   Opcode = 0x0F
	ReadResponseOnly   Opcode = 0x10
	Acknowledge        Opcode = 0x11
	AtomicAcknowledge  Opcode = 0x12
	CompareSwap        Opcode = 0x13
	FetchAdd           Opcode = 0x14
	SendLastInvalidate Opcode = 0x16
	SendOnlyInvalidate Opcode = 0x17
	UDSendOnly         Opcode = ClassUD | SendOnly
	UDSendOnlyImm      Opcode = ClassUD | SendOnlyImm
)

// Header flags: which extension headers follow the BTH (in wire order:
// DETH, RETH or AtomicETH, AETH, AtomicAckETH, ImmDt or IETH).
type HdrMask uint32

const (
	HasDETH HdrMask = 1 << iota
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasPayload // the opcode carries a payload (possibly of 0 bytes)
	IsFirst    // first packet of a multi-packet message
	IsMiddle   // middle packet
	IsLast     // last packet of a multi-packet message
	IsOnly     // the whole message in one packet
	IsRequest  // sent by a requester (else a response)
	IsSend     // a SEND operation (consumes a receive WQE)
	IsWrite    // an RDMA WRITE
	IsRead     // an RDMA READ request or response
)

// OpInfo describes one opcode.
type OpInfo struct {
	Name  string
	Flags HdrMask
	// HdrLen is the length of BTH plus every extension header.
	HdrLen int
}

var opTable [256]OpInfo

func def(op Opcode, name string, f HdrMask) {
	n := BTHSize
	if f&HasDETH != 0 {
		n += DETHSize
	}
	if f&HasRETH != 0 {
		n += RETHSize
	}
	if f&HasAtomicETH != 0 {
		n += AtomicETHSize
	}
	if f&HasAETH != 0 {
		n += AETHSize
	}
	if f&HasAtomicAckETH != 0 {
		n += AtomicAckETHSize
	}
	if f&HasImmDt != 0 {
		n += ImmDtSize
	}
	if f&HasIETH != 0 {
		n += IETHSize
	}
	opTable[op] = OpInfo{Name: name, Flags: f, HdrLen: n}
}

func init() {
	const (
		req = IsRequest
		pl  = HasPayload
	)
	for _, class := range []Opcode{ClassRC, ClassUC} {
		p := "RC "
		if class == ClassUC {
			p = "UC "
		}
		def(class|SendFirst, p+"SEND_FIRST", req|pl|IsSend|IsFirst)
		def(class|SendMiddle, p+"SEND_MIDDLE", req|pl|IsSend|IsMiddle)
		def(class|SendLast, p+"SEND_LAST", req|pl|IsSend|IsLast)
		def(class|SendLastImm, p+"SEND_LAST_WITH_IMMEDIATE", req|pl|IsSend|IsLast|HasImmDt)
		def(class|SendOnly, p+"SEND_ONLY", req|pl|IsSend|IsOnly)
		def(class|SendOnlyImm, p+"SEND_ONLY_WITH_IMMEDIATE", req|pl|IsSend|IsOnly|HasImmDt)
		def(class|WriteFirst, p+"RDMA_WRITE_FIRST", req|pl|IsWrite|IsFirst|HasRETH)
		def(class|WriteMiddle, p+"RDMA_WRITE_MIDDLE", req|pl|IsWrite|IsMiddle)
		def(class|WriteLast, p+"RDMA_WRITE_LAST", req|pl|IsWrite|IsLast)
		def(class|WriteLastImm, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", req|pl|IsWrite|IsLast|HasImmDt)
		def(class|WriteOnly, p+"RDMA_WRITE_ONLY", req|pl|IsWrite|IsOnly|HasRETH)
		def(class|WriteOnlyImm, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", req|pl|IsWrite|IsOnly|HasRETH|HasImmDt)
	}
	def(ReadRequest, "RC RDMA_READ_REQUEST", req|IsRead|IsOnly|HasRETH)
	def(ReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", pl|IsRead|IsFirst|HasAETH)
	def(ReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", pl|IsRead|IsMiddle)
	def(ReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", pl|IsRead|IsLast|HasAETH)
	def(ReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", pl|IsRead|IsOnly|HasAETH)
	def(Acknowledge, "RC ACKNOWLEDGE", IsOnly|HasAETH)
	def(AtomicAcknowledge, "RC ATOMIC_ACKNOWLEDGE", IsOnly|HasAETH|HasAtomicAckETH)
	def(CompareSwap, "RC COMPARE_SWAP", req|IsOnly|HasAtomicETH)
	def(FetchAdd, "RC FETCH_ADD", req|IsOnly|HasAtomicETH)
	def(SendLastInvalidate, "RC SEND_LAST_WITH_INVALIDATE", req|pl|IsSend|IsLast|HasIETH)
	def(SendOnlyInvalidate, "RC SEND_ONLY_WITH_INVALIDATE", req|pl|IsSend|IsOnly|HasIETH)
	def(UDSendOnly, "UD SEND_ONLY", req|pl|IsSend|IsOnly|HasDETH)
	def(UDSendOnlyImm, "UD SEND_ONLY_WITH_IMMEDIATE", req|pl|IsSend|IsOnly|HasDETH|HasImmDt)
}

// Info returns the description of op; Name is empty for an opcode tbrdma
// does not speak.
func (op Opcode) Info() OpInfo { return opTable[op] }

// Valid reports whether op is an RC, UC or UD opcode that tbrdma speaks.
func (op Opcode) Valid() bool { return opTable[op].HdrLen != 0 }

// Class returns the transport class bits of op.
func (op Opcode) Class() Opcode { return op & 0xE0 }

// Op returns the operation bits of op without the class.
func (op Opcode) Op() Opcode { return op & 0x1F }

// Has reports whether op has every flag in f.
func (op Opcode) Has(f HdrMask) bool { return opTable[op].Flags&f == f }

// HdrLen returns the length of the BTH and every extension header of op, or
// 0 for an opcode tbrdma does not speak.
func (op Opcode) HdrLen() int { return opTable[op].HdrLen }

// IsAtomic reports whether op is an atomic request.
func (op Opcode) IsAtomic() bool { return op == CompareSwap || op == FetchAdd }

func (op Opcode) String() string {
	if n := opTable[op].Name; n != "" {
		return n
	}
	return "opcode(0x" + strconv.FormatUint(uint64(op), 16) + ")"
}

// PadCount returns the number of zero bytes that pad a payload of n bytes to
// a multiple of four.
func PadCount(n int) int { return -n & 3 }
