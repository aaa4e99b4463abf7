package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// PingpongMsgLen is the size of ibv_rc_pingpong's address message:
// "LLLL:QQQQQQ:PPPPPP:" + 32 hex digits of GID + NUL.
const PingpongMsgLen = 52

// ServeLID is the LID "tbrdma serve" put in its pingpong address message
// ("tb" in ASCII) before it answered hints with a verdict, as one-test
// servers do (CheckLID, which serve now sends too); clients still send the
// hint to a server that shows it. LIDs mean nothing on RoCE (every tool sends 0000 and
// routes by GID), so a stock client ignores it; a tbrdma client sends its
// test hint only to a server that showed it, because a stock
// ibv_rc_pingpong server insists on reading exactly "done" (5 bytes) and
// fails on anything more.
const ServeLID uint16 = 0x7462

// pingpongDone is what the client sends last ("done" and its NUL).
var pingpongDone = []byte("done\x00")

// PingpongDest is one side's address as ibv_rc_pingpong exchanges it.
type PingpongDest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// Marshal returns the 52-byte wire form: lowercase hex fields and the 16 GID
// bytes in order, NUL-terminated.
func (d PingpongDest) Marshal() []byte {
	b := make([]byte, 0, PingpongMsgLen)
	b = fmt.Appendf(b, "%04x:%06x:%06x:", d.LID, d.QPN&0xFFFFFF, d.PSN&0xFFFFFF)
	for _, x := range d.GID {
		b = fmt.Appendf(b, "%02x", x)
	}
	return append(b, 0)
}

// GIDString formats the GID as ibv_rc_pingpong prints it (inet_ntop of an
// IPv6 address: "::ffff:198.18.0.2", "::" when zero).
func (d PingpongDest) GIDString() string { return netip.AddrFrom16(d.GID).String() }

// ParsePingpongDest parses the 52-byte message (a trailing NUL and anything
// after it are ignored).
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := strings.Split(string(b), ":")
	if len(f) != 4 || len(f[3]) != 32 {
		return PingpongDest{}, fmt.Errorf("malformed pingpong address %q: want LID:QPN:PSN:GID", b)
	}
	var d PingpongDest
	v, err := strconv.ParseUint(f[0], 16, 16)
	if err != nil {
		return PingpongDest{}, fmt.Errorf("malformed pingpong address %q: LID: %w", b, err)
	}
	d.LID = uint16(v)
	if v, err = strconv.ParseUint(f[1], 16, 24); err != nil {
		return PingpongDest{}, fmt.Errorf("malformed pingpong address %q: QPN: %w", b, err)
	}
	d.QPN = uint32(v)
	if v, err = strconv.ParseUint(f[2], 16, 24); err != nil {
		return PingpongDest{}, fmt.Errorf("malformed pingpong address %q: PSN: %w", b, err)
	}
	d.PSN = uint32(v)
	for i := range d.GID {
		x, err := strconv.ParseUint(f[3][2*i:2*i+2], 16, 8)
		if err != nil {
			return PingpongDest{}, fmt.Errorf("malformed pingpong address %q: GID: %w", b, err)
		}
		d.GID[i] = byte(x)
	}
	return d, nil
}

// PingpongClientExchange is the client side of ibv_rc_pingpong's exchange:
// send our address, read the server's, send "done".
func PingpongClientExchange(rw io.ReadWriter, my PingpongDest) (PingpongDest, error) {
	return PingpongClientExchangeHint(rw, my, "")
}

// PingpongClientExchangeHint is PingpongClientExchange that sends, in the
// same write as "done", tbrdma's test hint (docs/wire-format.md): a 2-byte
// big-endian length and the text — only when the server's address carries
// ServeLID ("tbrdma serve", which reads it with ReadPingpongDone) or
// CheckLID (a one-test tbrdma server, whose verdict it then reads: a
// refusal is a *RefusedError). A stock server gets "done" alone:
// rdma-core's ibv_rc_pingpong fails unless its read returns exactly those
// 5 bytes.
func PingpongClientExchangeHint(rw io.ReadWriter, my PingpongDest, hint string) (PingpongDest, error) {
	if len(hint) > MaxHintLen {
		return PingpongDest{}, fmt.Errorf("test hint of %d bytes, more than %d", len(hint), MaxHintLen)
	}
	if _, err := rw.Write(my.Marshal()); err != nil {
		return PingpongDest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	buf := make([]byte, PingpongMsgLen)
	if err := readFull(rw, buf); err != nil {
		if IsRefused(err) {
			return PingpongDest{}, err
		}
		return PingpongDest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := ParsePingpongDest(buf)
	if err != nil {
		return PingpongDest{}, err
	}
	done := pingpongDone
	if hint != "" && (rem.LID == ServeLID || rem.LID == CheckLID) {
		done = binary.BigEndian.AppendUint16(append([]byte(nil), pingpongDone...), uint16(len(hint)))
		done = append(done, hint...)
	}
	if _, err := rw.Write(done); err != nil {
		return PingpongDest{}, fmt.Errorf("couldn't send \"done\": %w", err)
	}
	if rem.LID == CheckLID {
		rem.LID = 0 // printed as the stock tools do
		if hint != "" {
			ok := make([]byte, len(pingpongAccept))
			if err := readFull(rw, ok); err != nil {
				if IsRefused(err) {
					return PingpongDest{}, err
				}
				return PingpongDest{}, fmt.Errorf("couldn't read the server's answer to our test hint: %w", err)
			}
			if string(ok) != pingpongAccept {
				return PingpongDest{}, fmt.Errorf("the server answered our test hint with %q, not %q", ok, pingpongAccept)
			}
		}
	}
	return rem, nil
}

// CheckLID is the LID a one-test tbrdma pingpong server puts in its address
// message ("tc"): a tbrdma client then sends its test hint after "done", as
// to ServeLID, and waits for the server's verdict: pingpongAccept, or a
// refusal (Refuse) saying which flags differ. A stock client ignores the
// LID (RoCE routes by GID) and sends "done" alone.
const CheckLID uint16 = 0x7463

// pingpongAccept is a one-test server's answer to a hint it accepts.
const pingpongAccept = "tbrdma ok\n"

// PingpongAccept tells a client whose hint a one-test server read (with
// PingpongServerExchangeHint) that the test can start.
func PingpongAccept(w io.Writer) error {
	if _, err := io.WriteString(w, pingpongAccept); err != nil {
		return fmt.Errorf("couldn't answer the client's test hint: %w", err)
	}
	return nil
}

// ReadPingpongDone reads the client's "done" and, when the client sent
// one, its test hint; a client that closes the connection after "done" (a
// stock ibv_rc_pingpong) has sent none: the hint is then "".
func ReadPingpongDone(r io.Reader) (string, error) {
	done := make([]byte, len(pingpongDone))
	if _, err := io.ReadFull(r, done); err != nil {
		return "", fmt.Errorf("couldn't read \"done\" from client: %w", err)
	}
	if !bytes.Equal(done[:4], pingpongDone[:4]) {
		return "", errors.New(`couldn't read "done" from client`)
	}
	n := make([]byte, 2)
	if _, err := io.ReadFull(r, n); err != nil {
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		return "", fmt.Errorf("test hint: %w", err)
	}
	l := int(binary.BigEndian.Uint16(n))
	if l == 0 || l > MaxHintLen {
		return "", fmt.Errorf("test hint of %d bytes: want 1..%d (not a tbrdma client?)", l, MaxHintLen)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("test hint: %w", err)
	}
	return string(b), nil
}

// PingpongServerExchange is the server side: read the client's address,
// call connect (which must bring the QP to RTS before the client can send),
// send our address and wait for the client's "done".
func PingpongServerExchange(rw io.ReadWriter, my PingpongDest, connect func(PingpongDest) error) (PingpongDest, error) {
	rem, _, err := pingpongServerExchange(rw, my, connect, false)
	return rem, err
}

// PingpongServerExchangeHint is PingpongServerExchange of a one-test tbrdma
// server: its address carries CheckLID, and after "done" it reads the
// client's test hint ("" from a stock client or an older tbrdma, which
// close the connection after "done"). When the hint is not "" the client
// waits for PingpongAccept or a refusal.
func PingpongServerExchangeHint(rw io.ReadWriter, my PingpongDest, connect func(PingpongDest) error) (PingpongDest, string, error) {
	my.LID = CheckLID
	return pingpongServerExchange(rw, my, connect, true)
}

func pingpongServerExchange(rw io.ReadWriter, my PingpongDest, connect func(PingpongDest) error, hint bool) (PingpongDest, string, error) {
	buf, err := ReadPingpongAddr(rw)
	if err != nil {
		return PingpongDest{}, "", err
	}
	rem, err := ParsePingpongDest(buf)
	if err != nil {
		return PingpongDest{}, "", err
	}
	if err := connect(rem); err != nil {
		return rem, "", err
	}
	if _, err := rw.Write(my.Marshal()); err != nil {
		return rem, "", fmt.Errorf("couldn't send local address: %w", err)
	}
	if hint {
		h, err := ReadPingpongDone(rw)
		return rem, h, err
	}
	done := make([]byte, len(pingpongDone))
	if _, err := io.ReadFull(rw, done); err != nil {
		return rem, "", fmt.Errorf("couldn't read \"done\" from client: %w", err)
	}
	if !bytes.Equal(done[:4], pingpongDone[:4]) {
		return rem, "", errors.New(`couldn't read "done" from client`)
	}
	return rem, "", nil
}

// ErrNotPingpong is ReadPingpongAddr's error for a client that started
// another exchange: a perftest client's version message.
var ErrNotPingpong = errors.New("not a pingpong client")

// LooksLikePingpong reports whether the first 16 bytes of an exchange are
// the start of a pingpong address ("LLLL:QQQQQQ:…") rather than, say, a
// perftest version message.
func LooksLikePingpong(first []byte) bool {
	return len(first) >= 12 && first[4] == ':' && first[11] == ':'
}

// ReadPingpongAddr reads a client's address message. It reads the first
// versionLen bytes on their own: a perftest client sends that many (its
// version) and waits for an answer, so reading 52 would wait forever. Such
// a client gets ErrNotPingpong (wrapped with what it sent), and its
// version message is consumed: the caller answers with Refuse.
func ReadPingpongAddr(r io.Reader) ([]byte, error) {
	buf := make([]byte, PingpongMsgLen)
	if _, err := io.ReadFull(r, buf[:versionLen]); err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if !LooksLikePingpong(buf) {
		v := buf[:versionLen]
		if i := bytes.IndexByte(v, 0); i >= 0 {
			v = v[:i]
		}
		return nil, fmt.Errorf("%w: the client sent %q (a perftest version message?)", ErrNotPingpong, v)
	}
	if _, err := io.ReadFull(r, buf[versionLen:]); err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	return buf, nil
}
