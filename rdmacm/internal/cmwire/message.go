package cmwire

import (
	"encoding/binary"

	"github.com/tbrdma/tbrdma/transport/wire"
)

// BodySize is the size of every CM message body: the 232 bytes of class
// data after the 24-byte MAD header.
const BodySize = wire.MADDataSize

// Message is a view of a whole 256-byte CM MAD that ParseMessage checked:
// base version 1, class CM (0x07), class version 2, method Send, and an
// attribute ID that Known reports.
type Message []byte

// ParseMessage returns the CM MAD at the start of b (the payload of a UD
// packet to QP1, without the ICRC) and its length, wire.MADSize. It never
// panics and never allocates; errors carry a Reason for counters.
//
// Status, ClassSpecific, the reserved word and the attribute modifier
// (ECE options in newer kernels) are not checked.
func ParseMessage(b []byte) (Message, int, error) {
	if len(b) < wire.MADSize {
		return nil, 0, errShortMAD
	}
	m := wire.MAD(b[:wire.MADSize])
	switch {
	case m.BaseVersion() != wire.MADBaseVersion:
		return nil, 0, errBaseVersion
	case m.MgmtClass() != wire.MgmtClassCM:
		return nil, 0, errClass
	case m.ClassVersion() != wire.CMClassVersion:
		return nil, 0, errClassVersion
	case m.Method() != wire.MethodSend:
		return nil, 0, errMethod
	case !AttrID(m.AttributeID()).Known():
		return nil, 0, errAttribute
	}
	return Message(m), wire.MADSize, nil
}

func (m Message) IsValid() bool { return len(m) >= wire.MADSize }

// MAD returns the whole MAD.
func (m Message) MAD() wire.MAD { return wire.MAD(m) }

func (m Message) Attr() AttrID          { return AttrID(binary.BigEndian.Uint16(m[16:])) }
func (m Message) TransactionID() uint64 { return binary.BigEndian.Uint64(m[8:]) }

// Body returns the 232-byte message body.
func (m Message) Body() []byte { return m[wire.MADHeaderSize:wire.MADSize] }

// The typed views of the body. Each is meaningful only when Attr is the
// matching attribute ID.
func (m Message) REQ() REQ         { return REQ(m.Body()) }
func (m Message) MRA() MRA         { return MRA(m.Body()) }
func (m Message) REJ() REJ         { return REJ(m.Body()) }
func (m Message) REP() REP         { return REP(m.Body()) }
func (m Message) RTU() RTU         { return RTU(m.Body()) }
func (m Message) DREQ() DREQ       { return DREQ(m.Body()) }
func (m Message) DREP() DREP       { return DREP(m.Body()) }
func (m Message) SIDRREQ() SIDRREQ { return SIDRREQ(m.Body()) }
func (m Message) SIDRREP() SIDRREP { return SIDRREP(m.Body()) }

// BodyFields returns the fields of the body as the Fields type of its
// attribute (REQFields, REPFields, ...), or nil for an unknown attribute.
// It allocates; the CM's receive path uses the typed views instead.
func (m Message) BodyFields() Body {
	switch m.Attr() {
	case AttrREQ:
		return m.REQ().Fields()
	case AttrMRA:
		return m.MRA().Fields()
	case AttrREJ:
		return m.REJ().Fields()
	case AttrREP:
		return m.REP().Fields()
	case AttrRTU:
		return m.RTU().Fields()
	case AttrDREQ:
		return m.DREQ().Fields()
	case AttrDREP:
		return m.DREP().Fields()
	case AttrSIDRREQ:
		return m.SIDRREQ().Fields()
	case AttrSIDRREP:
		return m.SIDRREP().Fields()
	}
	return nil
}

// Fields returns the MAD header and the body fields of m.
func (m Message) Fields() MessageFields {
	return MessageFields{Header: m.MAD().Fields(), Body: m.BodyFields()}
}

// Body is the Fields struct of one CM message: REQFields, MRAFields,
// REJFields, REPFields, RTUFields, DREQFields, DREPFields, SIDRREQFields or
// SIDRREPFields.
type Body interface {
	AttrID() AttrID
	Len() int // BodySize
	Append(b []byte) []byte
}

// Header returns the MAD header of a CM message: base version 1, class
// CM, class version 2, method Send, the given transaction ID and
// attribute, all else 0.
func Header(tid uint64, attr AttrID) wire.MADFields {
	return wire.MADFields{
		BaseVersion: wire.MADBaseVersion, MgmtClass: wire.MgmtClassCM, ClassVersion: wire.CMClassVersion,
		Method: wire.MethodSend, TransactionID: tid, AttributeID: uint16(attr),
	}
}

// MessageFields holds a whole CM MAD: header and body.
type MessageFields struct {
	// Header is written as is, except that a non-nil Body supplies the
	// attribute ID.
	Header wire.MADFields
	// Body is the message; nil writes 232 zero bytes.
	Body Body
}

// Len returns wire.MADSize.
func (MessageFields) Len() int { return wire.MADSize }

// Append appends the 256-byte MAD to b.
func (f MessageFields) Append(b []byte) []byte {
	h := f.Header
	if f.Body == nil {
		b = h.Append(b)
		return append(b, make([]byte, BodySize)...)
	}
	h.AttributeID = uint16(f.Body.AttrID())
	return f.Body.Append(h.Append(b))
}

// AppendMAD appends the 256-byte CM MAD carrying body, with the header
// Header(tid, body.AttrID()), to b.
func AppendMAD(b []byte, tid uint64, body Body) []byte {
	return body.Append(Header(tid, body.AttrID()).Append(b))
}
