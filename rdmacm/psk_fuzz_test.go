package rdmacm

import (
	"bytes"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// FuzzPSKTrailer feeds hostile message bodies to the trailer parser
// (pskTrailerOff, verify, stripPSK): it must not panic, must accept no
// body the key did not sign, and a body it signs must verify until any
// byte changes.
func FuzzPSKTrailer(f *testing.F) {
	k, _ := newPSK([]byte("fuzz key of at least 16 bytes"))
	other, _ := newPSK([]byte("a key that signs nothing here"))
	signed := func(seg bool, pd []byte) []byte {
		var fl cmwire.REQFields
		copy(fl.PrivateData[:], pd)
		if seg {
			putSegTrailer(fl.PrivateData[:], 32768)
		}
		reservePSK(fl.PrivateData[:], seg, false)
		mad := cmwire.AppendMAD(nil, 1, fl)
		k.sign(pskREQ, nil, mad)
		return mad[wire.MADHeaderSize:wire.MADSize]
	}
	f.Add(signed(false, []byte("hello")), uint8(0))
	f.Add(signed(true, nil), uint8(3))
	f.Add([]byte("tbK\x01"), uint8(0))
	f.Add(append(make([]byte, 192), "tbK\x01"+string(make([]byte, 28))+"tbSG\x01\x00\x00\x20"...), uint8(7))
	f.Fuzz(func(t *testing.T, body []byte, flip uint8) {
		// Arbitrary input (the seeds are signed with k): no panic; a
		// trailer never verifies under a key that did not sign it.
		pskTrailerOff(body)
		k.verify(pskREQ, nil, body)
		if _, _, ok := other.verify(pskREQ, nil, body); ok {
			t.Fatal("a body verified under a key that signed nothing")
		}
		pd := bytes.Clone(body)
		stripPSK(pd)
		if len(body) >= cmwire.BodySize {
			stripPSK(pd[len(pd)-cmwire.REQPrivateDataSize:])
		}
		// Signed: verifies; one changed bit anywhere does not.
		s := signed(flip&1 != 0, body[:min(len(body), reqUserLimit(true, flip&1 != 0))])
		if _, _, ok := k.verify(pskREQ, nil, s); !ok {
			t.Fatal("a signed body did not verify")
		}
		if _, _, ok := k.verify(pskREP, nil, s); ok {
			t.Fatal("a REQ MAC verified as a REP's")
		}
		if len(body) > 0 {
			i := int(body[0]) % len(s)
			s[i] ^= 1 << (flip % 8)
			if _, _, ok := k.verify(pskREQ, nil, s); ok {
				t.Fatalf("verified after flipping a bit of byte %d", i)
			}
		}
	})
}

// BenchmarkPSKVerify: the cost of checking one REQ's trailer, paid for
// every REQ a listener with a key receives.
func BenchmarkPSKVerify(b *testing.B) {
	k, _ := newPSK([]byte("benchmark key of 32 bytes length"))
	var fl cmwire.REQFields
	reservePSK(fl.PrivateData[:], false, false)
	mad := cmwire.AppendMAD(nil, 1, fl)
	k.sign(pskREQ, nil, mad)
	body := mad[wire.MADHeaderSize:wire.MADSize]
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := k.verify(pskREQ, nil, body); !ok {
			b.Fatal("does not verify")
		}
	}
}

// TestReplayCacheBounds: a nonce is refused within the window and
// accepted after it; the cache never holds more than pskReplayMax nonces
// (the oldest go first) and empties as the window passes.
func TestReplayCacheBounds(t *testing.T) {
	var c replayCache
	t0 := time.Unix(1e9, 0)
	n := func(i int) (b [pskNonceLen]byte) {
		b[0], b[1], b[2] = byte(i), byte(i>>8), byte(i>>16)
		return b
	}
	if !c.fresh(t0, n(0)) || c.fresh(t0.Add(time.Second), n(0)) {
		t.Fatal("a nonce seen a second ago is not refused")
	}
	if !c.fresh(t0.Add(pskReplayWindow), n(0)) {
		t.Fatal("a nonce is still refused after the window")
	}
	for i := 1; i <= pskReplayMax+1000; i++ {
		if !c.fresh(t0.Add(pskReplayWindow+time.Duration(i)*time.Millisecond), n(i)) {
			t.Fatalf("fresh nonce %d refused", i)
		}
		if c.len() > pskReplayMax {
			t.Fatalf("%d nonces kept, at most %d", c.len(), pskReplayMax)
		}
	}
	if c.fresh(t0.Add(pskReplayWindow+time.Duration(pskReplayMax+1000)*time.Millisecond), n(pskReplayMax+1000)) {
		t.Fatal("the newest nonce is not refused")
	}
	c.fresh(t0.Add(3*pskReplayWindow), n(1<<20))
	if c.len() != 1 || len(c.order)-c.head != 1 {
		t.Fatalf("after the window: %d nonces, %d in order", c.len(), len(c.order)-c.head)
	}
}
