package perf

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"time"
)

// A server that will not run a client's test says why in one line of
// text in place of its next message, then closes the connection
// (docs/wire-format.md, "Refusal"): RefusalPrefix, the reason, "\n". No
// message of perftest's or ibv_rc_pingpong's exchange starts with these
// bytes (version digits, a big-endian page size, an MTU digit, hex
// fields), so a tbrdma peer recognises a refusal wherever it reads one; a
// stock peer or an older tbrdma sees a malformed message or the closed
// connection and exits with an error.
const RefusalPrefix = "tbrdma refused: "

// maxRefusal bounds the reason a peer reads.
const maxRefusal = 1024

// RefusedError is the peer's refusal (Refuse), as the other end reads it.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "the server refused the test: " + e.Reason }

// refusalStart reports whether got, the first bytes of a message, start
// (or, when shorter than the prefix, are the start of) a refusal.
func refusalStart(got []byte) bool {
	n := min(len(got), len(RefusalPrefix))
	return n > 0 && string(got[:n]) == RefusalPrefix[:n]
}

// readFull is io.ReadFull that recognises a refusal in what it reads and
// returns it as a *RefusedError.
func readFull(r io.Reader, b []byte) error {
	n, err := io.ReadFull(r, b)
	if n == 0 || !refusalStart(b[:n]) {
		return err
	}
	if n < len(b) || err != nil { // the connection ended inside the message
		return parseRefusal(b[:n], err)
	}
	// The line may go on past the message: read it to its end.
	line := append([]byte(nil), b...)
	one := make([]byte, 1)
	for !bytes.Contains(line, []byte{'\n'}) && len(line) < maxRefusal {
		if _, err := r.Read(one); err != nil {
			break
		}
		line = append(line, one[0])
	}
	return parseRefusal(line, nil)
}

// parseRefusal returns the refusal in line, or, when line is only the
// start of the prefix, err.
func parseRefusal(line []byte, err error) error {
	rest, ok := bytes.CutPrefix(line, []byte(RefusalPrefix))
	if !ok {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	reason := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, string(rest))
	return &RefusedError{Reason: reason}
}

// Refuse sends a refusal with reason on conn in place of this end's next
// message, and closes conn once the peer has read it: it stops writing,
// then reads (and drops) what the peer still sends until the peer closes
// or linger passes, so that the peer's unread bytes do not turn the close
// into a reset that would lose the refusal.
func Refuse(conn net.Conn, reason string, linger time.Duration) error {
	reason = strings.ReplaceAll(reason, "\n", " ")
	_, err := conn.Write([]byte(RefusalPrefix + reason + "\n"))
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(linger))
	io.Copy(io.Discard, conn)
	conn.Close()
	return err
}

// IsRefused reports whether err is a peer's refusal.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}
