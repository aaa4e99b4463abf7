package sniff

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Wrap returns a transport.Conn that passes every call to c and records
// with rec each packet c reads and each packet it sends, so a session can
// be opened in Wireshark.
//
// Sent packets are recorded after c.WriteBatch returns, from the message
// buffers into which c wrote the ICRC: the bytes recorded are the bytes
// sent. Their IPv4 identification is recovered from that ICRC, so a packet
// sent as segment k of a UDP GSO batch shows ID k, as on the wire. Received
// packets are recorded with the identification c recovered (Message.IPID).
//
// Recording errors do not disturb the data path: the first one is returned
// by Close. The wrapper adds an Unwrap method returning c (which
// transport.OffloadsOf follows).
func Wrap(c transport.Conn, rec *Recorder) transport.Conn {
	return &conn{Conn: c, rec: rec}
}

type conn struct {
	transport.Conn
	rec *Recorder

	mu  sync.Mutex
	err error // first recording error
}

func (c *conn) ReadBatch(msgs []transport.Message) (int, error) {
	n, err := c.Conn.ReadBatch(msgs)
	if n > 0 {
		now := time.Now()
		local := c.Conn.LocalAddr()
		for i := range msgs[:n] {
			m := &msgs[i]
			to := local
			if m.Local.IsValid() {
				to = netip.AddrPortFrom(m.Local, local.Port())
			}
			c.record(c.rec.Record(now, m.Addr, to, m.IPID, m.Buf))
		}
	}
	return n, err
}

func (c *conn) WriteBatch(msgs []transport.Message) (int, error) {
	n, err := c.Conn.WriteBatch(msgs)
	if n > 0 {
		now := time.Now()
		local := c.Conn.LocalAddr()
		for i := range msgs[:n] {
			m := &msgs[i]
			id, _ := wire.VerifyICRC(m.Buf, local, m.Addr)
			c.record(c.rec.Record(now, local, m.Addr, id, m.Buf))
		}
	}
	return n, err
}

func (c *conn) record(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// Close closes the wrapped Conn and returns its error joined with the first
// recording error.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(err, c.err)
}

// Unwrap returns the wrapped Conn.
func (c *conn) Unwrap() transport.Conn { return c.Conn }
