package wire

import "strconv"

// MTU is an InfiniBand path MTU code, as ibverbs numbers it (IBV_MTU_*) and
// as the CM REQ's 4-bit "Path Packet Payload MTU" field carries it:
// 1..5 = 256..4096 bytes.
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of m, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "mtu(" + strconv.Itoa(int(m)) + ")"
}

// MTUFromBytes returns the largest MTU not above n bytes, or 0 when n is
// below 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}
