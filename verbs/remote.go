package verbs

import (
	"encoding/binary"
	"fmt"
	"math"
)

// RemoteBufferSize is the length of a marshalled RemoteBuffer.
const RemoteBufferSize = 16

// RemoteBuffer describes memory a peer may access with RDMA READ, WRITE or
// atomics: what one end sends the other, usually in connection private
// data or a SEND, before the other end posts work requests on it.
//
// Len is 32 bits: one work request moves at most MaxMessageSize (2 GiB)
// bytes, and the marshalled layout is then rping's rping_rdma_info, which
// C programs already exchange.
type RemoteBuffer struct {
	Addr uint64 // virtual address of the first byte (MR.Addr)
	Len  uint32 // length in bytes
	RKey RKey   // the MR's remote key
}

// RemoteBuffer describes the whole region for a peer. A region longer than
// 4 GiB - 1 bytes is described up to that length; describe a part of it by
// hand (Addr: mr.Addr() + offset).
func (mr *MR) RemoteBuffer() RemoteBuffer {
	n := uint64(mr.Len())
	if n > math.MaxUint32 {
		n = math.MaxUint32
	}
	return RemoteBuffer{Addr: mr.Addr(), Len: uint32(n), RKey: mr.RKey()}
}

// AppendBinary appends the descriptor's RemoteBufferSize bytes to b:
// Addr (8 bytes), RKey (4), Len (4), each big-endian.
func (rb RemoteBuffer) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, rb.Addr)
	b = binary.BigEndian.AppendUint32(b, uint32(rb.RKey))
	return binary.BigEndian.AppendUint32(b, rb.Len), nil
}

// MarshalBinary returns the descriptor's RemoteBufferSize bytes (see
// AppendBinary for the layout).
func (rb RemoteBuffer) MarshalBinary() ([]byte, error) {
	return rb.AppendBinary(make([]byte, 0, RemoteBufferSize))
}

// UnmarshalBinary reads a descriptor from the first RemoteBufferSize bytes
// of b; bytes after them are ignored, so a descriptor can lead a longer
// message (private data is padded). A shorter b is an error.
func (rb *RemoteBuffer) UnmarshalBinary(b []byte) error {
	if len(b) < RemoteBufferSize {
		return fmt.Errorf("verbs: remote buffer descriptor: %d bytes, want %d (verbs.RemoteBufferSize): the peer sent something else: %w", len(b), RemoteBufferSize, ErrInvalidArgument)
	}
	*rb = RemoteBuffer{
		Addr: binary.BigEndian.Uint64(b[0:]),
		RKey: RKey(binary.BigEndian.Uint32(b[8:])),
		Len:  binary.BigEndian.Uint32(b[12:]),
	}
	return nil
}

// String is "len@addr/rkey" in hex, for logs.
func (rb RemoteBuffer) String() string {
	return fmt.Sprintf("%d@%#x/%#x", rb.Len, rb.Addr, uint32(rb.RKey))
}
