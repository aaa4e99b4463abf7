package rdmacm

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// The pre-shared key trailer (docs/wire-format.md, "Pre-shared key
// authentication"): tbrdma's optional authentication of rdma_cm
// connections. With a key configured, the REQ, the REP and the RTU each
// carry 32 bytes at the end of their private data (before the 8-byte
// large-segment trailer when there is one):
//
//	"tbK" 01 (74 62 4B 01) | nonce (12 bytes) | MAC (16 bytes)
//
// MAC = the first 16 bytes of HMAC-SHA256(key, label | binding | body),
// where label is "tbrdma-psk-v1 REQ" / "REP" / "RTU", body is the whole
// 232-byte CM message body with the MAC field zeroed (so every field of
// the message is covered: comm IDs, service ID, CA GUID, QPN, starting
// PSN, GIDs, the CMA header's addresses and ports, the application's
// private data, the segment trailer, the nonce), and binding is nothing
// for the REQ, the REQ's MAC for the REP, the REQ's and the REP's MACs for
// the RTU. The REQ's nonce is random (crypto/rand); the REP's is random
// too, so each side contributes fresh randomness; the RTU's is zero.
//
// The passive side checks the REQ (REJ 28 with private data
// "tbrdma: authentication failed" when it fails, or when its nonce was
// seen in the last pskReplayWindow) and the RTU (a bad one is dropped);
// the active side checks the REP (a bad one is answered with that REJ and
// reported as REJECTED with a *RejectError whose Auth is set).

const (
	pskTrailerLen = 32
	pskNonceLen   = 12
	pskMACLen     = 16
	// MinPSKLen is the shortest key accepted.
	MinPSKLen = 16
	// pskReplayWindow is how long the nonce of an authenticated REQ is
	// remembered; pskReplayMax bounds how many are.
	pskReplayWindow = 2 * time.Minute
	pskReplayMax    = 8192
)

var pskMagic = [4]byte{'t', 'b', 'K', 1}

// authFailedText begins the private data of the REJ a failed check sends.
const authFailedText = "tbrdma: authentication failed"

// ErrAuthFailed is matched (errors.Is) by the error of a connection that
// failed the pre-shared key check, on either side.
var ErrAuthFailed = errors.New("authentication failed: check that both ends use the same key")

type pskKind byte

const (
	pskREQ pskKind = iota
	pskREP
	pskRTU
	pskSIDRREQ
	pskSIDRREP
)

var pskLabels = [...]string{pskREQ: "tbrdma-psk-v1 REQ", pskREP: "tbrdma-psk-v1 REP", pskRTU: "tbrdma-psk-v1 RTU",
	pskSIDRREQ: "tbrdma-psk-v1 SIDR_REQ", pskSIDRREP: "tbrdma-psk-v1 SIDR_REP"}

// pskKey is a configured key (a private copy).
type pskKey struct{ key []byte }

func newPSK(key []byte) (*pskKey, error) {
	if key == nil {
		return nil, nil
	}
	if len(key) < MinPSKLen {
		return nil, fmt.Errorf("rdmacm: pre-shared key of %d bytes: use at least %d (e.g. head -c 32 /dev/urandom | base64 > key): %w", len(key), MinPSKLen, ErrInvalidArgument)
	}
	return &pskKey{key: bytes.Clone(key)}, nil
}

// pskTrailerOff returns where the PSK trailer sits in a message body
// (the end of the private data, or just before a large-segment trailer),
// and whether one is there.
func pskTrailerOff(body []byte) (int, bool) {
	if len(body) < cmwire.BodySize {
		return 0, false
	}
	body = body[:cmwire.BodySize]
	if off := len(body) - pskTrailerLen; [4]byte(body[off:off+4]) == pskMagic {
		return off, true
	}
	if off := len(body) - segTrailerLen - pskTrailerLen; [4]byte(body[len(body)-segTrailerLen:][:4]) == segTrailerMagic &&
		[4]byte(body[off:off+4]) == pskMagic {
		return off, true
	}
	return 0, false
}

// mac computes the MAC of body (a copy is made with the MAC field at off
// zeroed).
func (k *pskKey) mac(kind pskKind, bind []byte, body []byte, off int) [pskMACLen]byte {
	var b [cmwire.BodySize]byte
	copy(b[:], body)
	clear(b[off+4+pskNonceLen : off+pskTrailerLen])
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte(pskLabels[kind]))
	h.Write(bind)
	h.Write(b[:])
	var m [pskMACLen]byte
	copy(m[:], h.Sum(nil))
	return m
}

// reservePSK writes a trailer skeleton (magic and nonce; random nonce
// unless zero is set) into private data pd, before a segment trailer when
// seg is set. The MAC is filled by sign once the message is encoded.
func reservePSK(pd []byte, seg, zeroNonce bool) {
	end := len(pd)
	if seg {
		end -= segTrailerLen
	}
	t := pd[end-pskTrailerLen : end]
	copy(t, pskMagic[:])
	if zeroNonce {
		clear(t[4:])
	} else {
		rand.Read(t[4 : 4+pskNonceLen])
		clear(t[4+pskNonceLen:])
	}
}

// sign fills the MAC of the trailer reservePSK put in the body of mad (a
// complete MAD) and returns it.
func (k *pskKey) sign(kind pskKind, bind []byte, mad []byte) [pskMACLen]byte {
	body := mad[wire.MADHeaderSize:wire.MADSize]
	off, ok := pskTrailerOff(body)
	if !ok {
		panic("rdmacm: sign without a PSK trailer") // a bug in this package, not input
	}
	m := k.mac(kind, bind, body, off)
	copy(body[off+4+pskNonceLen:], m[:])
	return m
}

// verify checks the trailer of a received body. It returns the MAC and
// nonce on success.
func (k *pskKey) verify(kind pskKind, bind []byte, body []byte) (mac [pskMACLen]byte, nonce [pskNonceLen]byte, ok bool) {
	off, found := pskTrailerOff(body)
	if !found {
		return mac, nonce, false
	}
	want := k.mac(kind, bind, body, off)
	got := body[off+4+pskNonceLen : off+pskTrailerLen]
	if !hmac.Equal(want[:], got) {
		return mac, nonce, false
	}
	copy(nonce[:], body[off+4:])
	return want, nonce, true
}

// stripPSK zeroes a PSK trailer at the end of private data pd (or before
// its segment trailer), so that the application sees its own data only.
func stripPSK(pd []byte) {
	if len(pd) < pskTrailerLen {
		return
	}
	end := len(pd)
	if [4]byte(pd[end-pskTrailerLen:][:4]) == pskMagic {
		clear(pd[end-pskTrailerLen:])
		return
	}
	if end -= segTrailerLen; end >= pskTrailerLen && [4]byte(pd[len(pd)-segTrailerLen:][:4]) == segTrailerMagic &&
		[4]byte(pd[end-pskTrailerLen:][:4]) == pskMagic {
		clear(pd[end-pskTrailerLen : end])
	}
}

// authRejectData is the private data of the REJ of a failed check.
func authRejectData(why string) []byte {
	s := authFailedText
	if why != "" {
		s += ": " + why
	}
	return []byte(s)
}

// isAuthReject says whether a REJ's reason and private data are those of
// a failed check.
func isAuthReject(reason RejectReason, pd []byte) bool {
	return reason == RejectConsumerDefined && bytes.HasPrefix(pd, []byte(authFailedText))
}

// replayCache remembers the nonces of authenticated REQs for
// pskReplayWindow, at most pskReplayMax of them (the oldest go first).
// Only REQs whose MAC is valid enter, so a peer without the key cannot
// fill it.
type replayCache struct {
	seen  map[[pskNonceLen]byte]time.Time
	order [][pskNonceLen]byte // FIFO of the keys of seen
	head  int
}

// fresh reports whether nonce was not seen within the window, and
// records it.
func (c *replayCache) fresh(now time.Time, nonce [pskNonceLen]byte) bool {
	if c.seen == nil {
		c.seen = map[[pskNonceLen]byte]time.Time{}
	}
	// Expire from the front.
	for c.head < len(c.order) {
		n := c.order[c.head]
		if t, ok := c.seen[n]; ok && now.Sub(t) < pskReplayWindow && len(c.seen) < pskReplayMax {
			break
		}
		delete(c.seen, n)
		c.order[c.head] = [pskNonceLen]byte{}
		c.head++
	}
	if c.head > len(c.order)/2 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
	if t, ok := c.seen[nonce]; ok && now.Sub(t) < pskReplayWindow {
		return false
	}
	c.seen[nonce] = now
	c.order = append(c.order, nonce)
	return true
}

func (c *replayCache) len() int { return len(c.seen) }

// Device-wide default keys: SetDevicePSK.
var (
	devicePSKMu sync.Mutex
	devicePSK   = map[weak.Pointer[verbs.Context]]*pskKey{}
)

// SetDevicePSK sets the pre-shared key every rdma_cm ID created on vctx
// afterwards uses unless its channel has one (ChannelOptions.PSK): a
// command line tool sets it once where it opens the device. nil removes
// it. The key must have at least MinPSKLen bytes. The setting goes away
// with vctx.
func SetDevicePSK(vctx *verbs.Context, key []byte) error {
	if vctx == nil {
		return fmt.Errorf("rdmacm: set device key: no verbs context: %w", ErrInvalidArgument)
	}
	k, err := newPSK(key)
	if err != nil {
		return err
	}
	wp := weak.Make(vctx)
	devicePSKMu.Lock()
	defer devicePSKMu.Unlock()
	if k == nil {
		delete(devicePSK, wp)
		return nil
	}
	if _, had := devicePSK[wp]; !had {
		runtime.AddCleanup(vctx, func(wp weak.Pointer[verbs.Context]) {
			devicePSKMu.Lock()
			delete(devicePSK, wp)
			devicePSKMu.Unlock()
		}, wp)
	}
	devicePSK[wp] = k
	return nil
}

func devicePSKOf(vctx *verbs.Context) *pskKey {
	devicePSKMu.Lock()
	defer devicePSKMu.Unlock()
	return devicePSK[weak.Make(vctx)]
}

// SetPSK sets the pre-shared key of the ID (nil: none), overriding the
// channel's and the device's; call it before Connect or Listen. The
// connection requests a listener hands out use the listener's key.
func (id *ID) SetPSK(key []byte) error {
	k, err := newPSK(key)
	if err != nil {
		return err
	}
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	if id.state != stateIdle && id.state != stateAddrResolved && id.state != stateRouteResolved {
		return fmt.Errorf("rdmacm: set key: after Connect or Listen: %w", ErrInvalidState)
	}
	id.psk.key = k
	return nil
}

// reqUserLimit is how many bytes of private data the application may put
// in a REQ (56 less the trailers).
func reqUserLimit(psk, seg bool) int {
	n := cmwire.REQUserDataSize
	if psk {
		n -= pskTrailerLen
	}
	if seg {
		n -= segTrailerLen
	}
	return n
}

// repUserLimit is the same for a REP (196 less the trailers).
func repUserLimit(psk, seg bool) int {
	n := cmwire.REPPrivateDataSize
	if psk {
		n -= pskTrailerLen
	}
	if seg {
		n -= segTrailerLen
	}
	return n
}

// rtuPrivateData is the private data of the active side's RTU: nil
// without a key, else 224 bytes ending in a trailer whose MAC binds the
// REQ and the REP (the RTU body is fully determined by the comm IDs, so
// it is built here as fsm.SendRTU will build it).
func (id *ID) rtuPrivateData() []byte {
	if id.psk.key == nil {
		return nil
	}
	f := cmwire.RTUFields{LocalCommID: id.conn.LocalID, RemoteCommID: id.conn.RemoteID}
	reservePSK(f.PrivateData[:], false, true)
	mad := cmwire.AppendMAD(nil, id.conn.TID, f)
	id.psk.key.sign(pskRTU, id.rtuBinding(), mad)
	return bytes.Clone(cmwire.Message(mad).RTU().PrivateData())
}

func (id *ID) rtuBinding() []byte {
	b := make([]byte, 0, 2*pskMACLen)
	b = append(b, id.psk.req[:]...)
	return append(b, id.psk.rep[:]...)
}

// authFailedREP handles a REP that does not prove the key (active side):
// REJ 28 with the authentication private data, and REJECTED.
func (id *ID) authFailedREP(now time.Time) {
	d := id.d
	d.authFailures++
	d.cm.AuthFailures.Add(1)
	pd := authRejectData("reply not authenticated")
	id.apply(now, id.conn.Reject(now, cmwire.RejConsumerDefined, nil, pd))
	id.ch.post(&Event{Type: EventRejected, ID: id, Status: int(RejectConsumerDefined), Param: ConnParam{PrivateData: pd},
		Err: &RejectError{Reason: RejectConsumerDefined, PrivateData: pd, Auth: true, Local: true}})
}
