package wire

import (
	"fmt"
	"net/netip"
	"strconv"
)

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons use the half-window rule of rxe and the IBTA: a is after b
// when (a-b) mod 2^24 lies in 1 .. 2^23-1.
type PSN uint32

// PSNMask keeps the 24 significant bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24 (n may be negative).
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p-q in the range -2^23 .. 2^23-1.
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// Less reports whether p comes before q in sequence space.
func (p PSN) Less(q PSN) bool { return p.Diff(q) < 0 }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p&^PSNMask == 0 }

func (p PSN) String() string { return "0x" + strconv.FormatUint(uint64(p), 16) }

// AppendTo appends the text form of p to b.
func (p PSN) AppendTo(b []byte) []byte {
	return strconv.AppendUint(append(b, "0x"...), uint64(p), 16)
}

// QPN is a 24-bit queue pair number. QPN 0 is invalid on RoCE (there is no
// QP0); QPN 1 is the general services interface (GSI) QP that carries MADs.
type QPN uint32

// QPNGSI is the queue pair that carries management datagrams (QP1).
const QPNGSI QPN = 1

// Valid reports whether q is a usable QPN: non-zero and 24 bits.
func (q QPN) Valid() bool { return q != 0 && q&^0xFFFFFF == 0 }

func (q QPN) String() string { return "0x" + strconv.FormatUint(uint64(q), 16) }

// AppendTo appends the text form of q to b.
func (q QPN) AppendTo(b []byte) []byte {
	return strconv.AppendUint(append(b, "0x"...), uint64(q), 16)
}

// RKey is a remote key: it names a memory region in RETH and AtomicETH.
type RKey uint32

func (k RKey) String() string { return fmt.Sprintf("0x%08x", uint32(k)) }

// LKey is a local key: it names a memory region in a scatter/gather entry.
type LKey uint32

func (k LKey) String() string { return fmt.Sprintf("0x%08x", uint32(k)) }

// QKey is the 32-bit key a UD queue pair checks in DETH.
type QKey uint32

// QKeyGSI is the Q_Key of QP1 (IB_QP1_QKEY).
const QKeyGSI QKey = 0x80010000

// PKeyDefault is the default full-member partition key rxe always sends.
const PKeyDefault = 0xFFFF

// GID is a 128-bit global identifier. On RoCEv2 it is an IP address: an
// IPv6 address as is, an IPv4 address IPv4-mapped (::ffff:a.b.c.d). The zero
// GID is invalid.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address. An IPv4 address
// becomes IPv4-mapped; a zone is dropped.
func GIDFromAddr(a netip.Addr) GID {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for: IPv4 for an IPv4-mapped
// GID, IPv6 otherwise.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsV4Mapped reports whether g is an IPv4-mapped GID (::ffff:a.b.c.d).
func (g GID) IsV4Mapped() bool { return netip.AddrFrom16(g).Is4In6() }

// IsZero reports whether g is the invalid zero GID.
func (g GID) IsZero() bool { return g == GID{} }

// String returns the GID in IPv6 notation, as ibv_devinfo and sysfs show it
// (IPv4-mapped GIDs print as ::ffff:a.b.c.d).
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// AppendTo appends the text form of g to b.
func (g GID) AppendTo(b []byte) []byte { return netip.AddrFrom16(g).AppendTo(b) }
