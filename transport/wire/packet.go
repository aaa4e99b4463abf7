package wire

// A RoCEv2 packet is the UDP payload on port 4791:
//
//	BTH | [DETH] [RETH | AtomicETH] [AETH] [AtomicAckETH] [ImmDt | IETH] | payload | pad | ICRC

// UDPPort is the RoCEv2 destination UDP port.
const UDPPort = 4791

// MaxHeaderRoom is the most header bytes any opcode puts before its
// payload (BTH + RETH + ImmDt, BTH + AtomicETH, …), rounded up: send
// buffers reserve it in front of the payload.
const MaxHeaderRoom = 48

// Packet is a parsed RoCEv2 packet. The views alias the parsed buffer; a
// header the opcode does not carry is nil. Payload excludes pad and ICRC.
type Packet struct {
	BTH          BTH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	Payload      []byte
	// Pad is the pad bytes between payload and ICRC.
	Pad []byte
	// ICRC is the 4-byte trailer.
	ICRC []byte
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// Bytes returns the whole parsed packet, BTH to ICRC, as a view of the
// buffer Parse was given (nil for the zero Packet).
func (p *Packet) Bytes() []byte {
	if p.BTH == nil {
		return nil
	}
	n := p.BTH.Opcode().HdrLen() + len(p.Payload) + len(p.Pad) + len(p.ICRC)
	return p.BTH[:n:n]
}

// Parse parses b, a whole UDP payload including the ICRC trailer, into p.
// It checks the structure (transport version 0, a known RC/UC/UD opcode,
// lengths, pad count, destination QPN not 0) but not the ICRC (see
// VerifyICRC) nor anything that depends on queue pair state. It never
// allocates; on error p is the zero Packet (an error or a value, never
// both). The error is a *ParseError whose Reason names the failure.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{}
	if len(b) < BTHSize+ICRCSize {
		return errShort
	}
	bth := BTH(b[:BTHSize])
	if bth.TVer() != 0 {
		return errTVer
	}
	op := bth.Opcode()
	info := &opTable[op]
	if info.HdrLen == 0 {
		return errOpcode
	}
	if bth.DestQP() == 0 {
		return errQPN
	}
	end := len(b) - ICRCSize
	if end < info.HdrLen {
		return errShort
	}
	p.BTH = bth
	off := BTHSize
	f := info.Flags
	if f&HasDETH != 0 {
		p.DETH = DETH(b[off : off+DETHSize])
		off += DETHSize
	}
	if f&HasRETH != 0 {
		p.RETH = RETH(b[off : off+RETHSize])
		off += RETHSize
	}
	if f&HasAtomicETH != 0 {
		p.AtomicETH = AtomicETH(b[off : off+AtomicETHSize])
		off += AtomicETHSize
	}
	if f&HasAETH != 0 {
		p.AETH = AETH(b[off : off+AETHSize])
		off += AETHSize
	}
	if f&HasAtomicAckETH != 0 {
		p.AtomicAckETH = AtomicAckETH(b[off : off+AtomicAckETHSize])
		off += AtomicAckETHSize
	}
	if f&HasImmDt != 0 {
		p.ImmDt = ImmDt(b[off : off+ImmDtSize])
		off += ImmDtSize
	}
	if f&HasIETH != 0 {
		p.IETH = IETH(b[off : off+IETHSize])
		off += IETHSize
	}
	pad := bth.PadCnt()
	rest := end - off
	if f&HasPayload == 0 {
		if rest != 0 {
			*p = Packet{}
			return errPayload
		}
		if pad != 0 {
			*p = Packet{}
			return errPad
		}
	} else if pad > rest {
		*p = Packet{}
		return errPad
	}
	p.Payload = b[off : end-pad : end-pad]
	p.Pad = b[end-pad : end : end]
	p.ICRC = b[end:]
	return nil
}

// Headers holds the fields of every header a packet may carry, for
// building packets. Only the headers its Opcode carries are encoded.
type Headers struct {
	BTH          BTHFields
	DETH         DETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDt        ImmDtFields
	IETH         IETHFields
}

// Len returns the length of the headers h.BTH.Opcode carries, or 0 for an
// unknown opcode.
func (h *Headers) Len() int { return h.BTH.Opcode.HdrLen() }

// Append appends the headers h.BTH.Opcode carries to b, in wire order.
// It does not touch PadCnt: use AppendPacket to get it right.
func (h *Headers) Append(b []byte) []byte {
	f := opTable[h.BTH.Opcode].Flags
	b = h.BTH.Append(b)
	if f&HasDETH != 0 {
		b = h.DETH.Append(b)
	}
	if f&HasRETH != 0 {
		b = h.RETH.Append(b)
	}
	if f&HasAtomicETH != 0 {
		b = h.AtomicETH.Append(b)
	}
	if f&HasAETH != 0 {
		b = h.AETH.Append(b)
	}
	if f&HasAtomicAckETH != 0 {
		b = h.AtomicAckETH.Append(b)
	}
	if f&HasImmDt != 0 {
		b = h.ImmDt.Append(b)
	}
	if f&HasIETH != 0 {
		b = h.IETH.Append(b)
	}
	return b
}

// AppendPacket appends a whole packet (headers, payload, zero pad and a
// zero ICRC trailer to be filled by PutICRC) to b. h.BTH.PadCnt is set from
// the payload length.
func AppendPacket(b []byte, h *Headers, payload []byte) []byte {
	pad := PadCount(len(payload))
	h.BTH.PadCnt = uint8(pad)
	b = h.Append(b)
	b = append(b, payload...)
	b = append(b, zeros[:pad+ICRCSize]...)
	return b
}

var zeros [8]byte

// Fields returns the fields of every header p carries (the others are zero).
func (p *Packet) Fields() Headers {
	var h Headers
	if p.BTH != nil {
		h.BTH = p.BTH.Fields()
	}
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		h.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		h.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.Fields()
	}
	return h
}
