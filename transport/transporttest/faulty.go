package transporttest

import (
	"net/netip"
	"sync"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// FaultyConn is a real transport.Conn (a UDP endpoint) with the Network's
// fault stages in its path: what it sends goes through loss, burst loss,
// duplication, reordering, delay and jitter, seeded and reproducible, as
// on a Network link; what it receives may be corrupted. It is the fault
// injection of end-to-end runs between processes (the CLI's --fault flag)
// on a machine without tc netem.
//
// Corruption is applied on receipt, because the endpoint computes the
// ICRC as it sends: a bit flipped before that would be covered by a fresh
// ICRC and go undetected, which no wire does. So a received packet picked
// for corruption gets one bit flipped (any but those of BTH byte 4, which
// the ICRC does not cover) and its ICRC is checked again, as the endpoint
// checked it: it fails, and the packet is dropped and counted as an ICRC
// drop (Stats), as the endpoint would have dropped it off the wire.
type FaultyConn struct {
	transport.Conn
	net *Network

	wmu sync.Mutex // one inner WriteBatch at a time (delayed packets leave from timers)
	out []transport.Message

	rmu       sync.Mutex // guards rng use and drops on the read side
	in        *link
	icrcDrops uint64
}

// Faulty wraps c with the faults f, whose random choices derive from seed
// (each destination gets its own generator, as a Network's links do).
// f.Corrupt applies to received packets, everything else to sent ones.
// Closing the FaultyConn discards packets still held or delayed.
func Faulty(c transport.Conn, seed uint64, f Faults) *FaultyConn {
	fc := &FaultyConn{Conn: c, net: NewNetwork(seed)}
	out := f
	out.Corrupt = 0
	fc.net.faults = out
	fc.net.egress = fc.send
	fc.in = fc.net.link(Dir{To: c.LocalAddr()})
	fc.in.faults = &Faults{Corrupt: f.Corrupt}
	return fc
}

var _ transport.Conn = (*FaultyConn)(nil)

// WriteBatch implements transport.Conn: each packet is copied (the caller
// reuses its buffers) and handed to the fault stages; those that survive
// are sent now or when their delay ends. It reports every packet as sent,
// as a lossy wire would.
func (fc *FaultyConn) WriteBatch(msgs []transport.Message) (int, error) {
	local := fc.Conn.LocalAddr()
	n := fc.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		buf := make([]byte, 0, len(m.Buf)+len(m.Payload))
		if m.Payload != nil {
			// Only endpoints that gather send Payload; a FaultyConn does
			// not claim to, but keep the packet whole if a caller did.
			t := len(m.Buf) - (int(m.Buf[1]>>4&3) + wire.ICRCSize)
			buf = append(append(append(buf, m.Buf[:t]...), m.Payload...), m.Buf[t:]...)
		} else {
			buf = append(buf, m.Buf...)
		}
		n.stats.Sent++
		if n.closed {
			continue
		}
		n.send(n.link(Dir{From: local, To: m.Addr}), packet{buf: buf, from: local, to: m.Addr})
	}
	return len(msgs), nil
}

// send is the Network's egress: it writes q through the wrapped Conn.
// n.mu is held.
func (fc *FaultyConn) send(q packet) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.out = append(fc.out[:0], transport.Message{Buf: q.buf, Addr: q.to})
	fc.Conn.WriteBatch(fc.out) // a send error is a lost packet here, as on a wire
	fc.out[0] = transport.Message{}
}

// ReadBatch implements transport.Conn: it reads from the wrapped Conn and
// drops the packets picked for corruption (see FaultyConn).
func (fc *FaultyConn) ReadBatch(msgs []transport.Message) (int, error) {
	for {
		n, err := fc.Conn.ReadBatch(msgs)
		if n == 0 || err != nil {
			return n, err
		}
		fc.rmu.Lock()
		k := 0
		for i := range n {
			m := msgs[i]
			if fc.corrupt(&m) {
				continue
			}
			msgs[k] = m
			k++
		}
		fc.rmu.Unlock()
		if k > 0 {
			return k, nil
		}
	}
}

// corrupt decides whether m is corrupted on the way in; if so it flips a
// bit and checks the ICRC again, and reports whether the packet must be
// dropped. fc.rmu is held.
func (fc *FaultyConn) corrupt(m *transport.Message) bool {
	l := fc.in
	if !l.chance(l.faults.Corrupt) || len(m.Buf) < wire.BTHSize+wire.ICRCSize {
		return false
	}
	bit := l.rng.IntN((len(m.Buf) - 1) * 8)
	if bit >= bthMaskedByte*8 {
		bit += 8
	}
	m.Buf[bit/8] ^= 1 << (bit % 8)
	fc.net.mu.Lock()
	fc.net.stats.Corrupted++
	fc.net.mu.Unlock()
	local := netip.AddrPortFrom(m.Local, fc.Conn.LocalAddr().Port())
	if !m.Local.IsValid() {
		local = fc.Conn.LocalAddr()
	}
	if id, ok := wire.VerifyICRC(m.Buf, m.Addr, local); ok && id == m.IPID {
		m.Buf[bit/8] ^= 1 << (bit % 8) // undetected (cannot happen for one bit): undo
		return false
	}
	fc.icrcDrops++
	return true
}

// Stats implements transport.Conn: the wrapped Conn's counters, with the
// packets this wrapper corrupted counted as ICRC drops and not as
// received.
func (fc *FaultyConn) Stats() transport.Stats {
	st := fc.Conn.Stats()
	fc.rmu.Lock()
	st.Drops[wire.ReasonICRC] += fc.icrcDrops
	st.PacketsIn -= min(st.PacketsIn, fc.icrcDrops)
	fc.rmu.Unlock()
	return st
}

// FaultStats reports what the faults did: packets sent, lost, duplicated,
// reordered, corrupted (on receipt) and delivered to the wire.
func (fc *FaultyConn) FaultStats() NetStats { return fc.net.Stats() }

// Close implements transport.Conn.
func (fc *FaultyConn) Close() error {
	fc.net.Close()
	return fc.Conn.Close()
}
