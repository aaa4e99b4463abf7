package perf

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// recorder keeps what one end wrote.
type recorder struct {
	net.Conn
	out bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) { r.out.Write(b); return r.Conn.Write(b) }

func exchangeVersions(t *testing.T, clientOffer, serverOffer int) (cl, sv *Comm, clOut, svOut []byte) {
	t.Helper()
	return exchangeVersionsWith(t, func(cl, sv *Comm) { cl.OfferSegment, sv.OfferSegment = clientOffer, serverOffer })
}

// exchangeVersionsWith runs ExchangeVersions between a client and a server
// that set sets up, and returns both and the bytes each wrote.
func exchangeVersionsWith(t *testing.T, set func(cl, sv *Comm)) (cl, sv *Comm, clOut, svOut []byte) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ra, rb := &recorder{Conn: a}, &recorder{Conn: b}
	cl, sv = NewComm(ra, false), NewComm(rb, true)
	set(cl, sv)
	errc := make(chan error, 1)
	go func() { _, err := sv.ExchangeVersions(); errc <- err }()
	if _, err := cl.ExchangeVersions(); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
	if cl.RemoteVersion != Version || sv.RemoteVersion != Version {
		t.Fatalf("versions %q %q", cl.RemoteVersion, sv.RemoteVersion)
	}
	return cl, sv, ra.out.Bytes(), rb.out.Bytes()
}

func TestSegmentOffer(t *testing.T) {
	plain := append([]byte(Version), make([]byte, versionLen-len(Version))...)
	for _, c := range []struct {
		name           string
		client, server int
		want           int
		clientPlain    bool
		serverPlain    bool
	}{
		{"neither", 0, 0, 0, true, true},
		{"both", 61440, 61440, 61440, false, false},
		{"both, smaller server", 61440, 32768, 32768, false, false},
		{"both, smaller client", 8192, 61440, 8192, false, false},
		{"client only", 61440, 0, 0, false, true},
		{"server only", 0, 61440, 0, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, sv, clOut, svOut := exchangeVersions(t, c.client, c.server)
			if cl.PeerSegment != c.want || sv.PeerSegment != c.want {
				t.Fatalf("agreed %d (client) and %d (server), want %d", cl.PeerSegment, sv.PeerSegment, c.want)
			}
			if len(clOut) != versionLen || len(svOut) != versionLen {
				t.Fatalf("messages of %d and %d bytes, want %d", len(clOut), len(svOut), versionLen)
			}
			// Without an offer the message is byte for byte perftest's.
			if got := bytes.Equal(clOut, plain); got != c.clientPlain {
				t.Fatalf("client message %q: plain = %v, want %v", clOut, got, c.clientPlain)
			}
			if got := bytes.Equal(svOut, plain); got != c.serverPlain {
				t.Fatalf("server message %q: plain = %v, want %v", svOut, got, c.serverPlain)
			}
		})
	}
}

func TestParseSegOffer(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"6.06\x00tbseg=60\x00\x00\x00", 61440},
		{"6.06\x00tbseg=8\x00", 8192},
		{"6.06\x00tbseg=32", 32768},
		{"6.06\x00tbseg=64\x00", 0},
		{"6.06\x00tbseg=6\x00", 0},
		{"6.06\x00tbseg=10\x00", 0},
		{"6.06\x00tbseg=\x00", 0},
		{"6.06\x00tbseg=1x\x00", 0},
		{"6.06\x00tbseg=0060\x00", 0},
		{"6.06\x00tbsEg=60\x00", 0},
		{"6.06tbseg=60", 0},
		{"\x00\x00\x00", 0},
		{"", 0},
	} {
		if got := parseSegOffer([]byte(c.in)); got != c.want {
			t.Errorf("parseSegOffer(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

var _ io.ReadWriter = (*recorder)(nil)

// The window offer: two tbrdma ends agree on TbrdmaWindow; a stock
// perftest on either side (no offer) gets perftest's own bytes from a
// tbrdma server and agrees on nothing; a segment offer implies the window
// offer.
func TestWindowOffer(t *testing.T) {
	plain := append([]byte(Version), make([]byte, versionLen-len(Version))...)
	for _, c := range []struct {
		name                 string
		client, server       bool // OfferWindow
		clientSeg, serverSeg int
		want                 bool
		serverPlain          bool
	}{
		{"both", true, true, 0, 0, true, false},
		{"stock client", false, true, 0, 0, false, true},
		{"stock server", true, false, 0, 0, false, true},
		{"segment offers only", false, false, 61440, 61440, false, false},
		{"segment offer and window offer", true, true, 61440, 0, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, sv, clOut, svOut := exchangeVersionsWith(t, func(cl, sv *Comm) {
				cl.OfferWindow, sv.OfferWindow = c.client, c.server
				cl.OfferSegment, sv.OfferSegment = c.clientSeg, c.serverSeg
			})
			if cl.PeerWindow != c.want || sv.PeerWindow != c.want {
				t.Fatalf("window agreed: client %v, server %v, want %v", cl.PeerWindow, sv.PeerWindow, c.want)
			}
			if got := bytes.Equal(svOut, plain); got != c.serverPlain {
				t.Fatalf("server message %q: plain = %v, want %v", svOut, got, c.serverPlain)
			}
			if c.client && c.clientSeg == 0 && !bytes.Equal(clOut[len(Version)+1:len(Version)+5], []byte("tbw\x00")) {
				t.Fatalf("client message %q lacks the window offer", clOut)
			}
		})
	}
	for _, b := range [][]byte{
		[]byte("6.06\x00tbw\x00\x00\x00\x00\x00\x00\x00\x00"),
		[]byte("6.06\x00tbseg=60\x00\x00\x00"),
	} {
		if !hasWindowOffer(b) {
			t.Errorf("hasWindowOffer(%q) = false", b)
		}
	}
	for _, b := range [][]byte{
		[]byte("6.06\x00tbwx\x00\x00\x00\x00\x00\x00\x00"),
		[]byte("6.06\x00tb\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		[]byte("6.06tbw"),
		[]byte("6.06\x00tbw"),
		nil,
	} {
		if hasWindowOffer(b) {
			t.Errorf("hasWindowOffer(%q) = true", b)
		}
	}
}

// The selective offer ("tbsr", "tbsr=N" with segments): two tbrdma ends
// that both offer it agree on selective retransmission, and on the window
// and segments as before; an end that offers only the window (or a stock
// perftest) agrees on no selective retransmission, and a server answers a
// client that did not offer it without it.
func TestSelectiveOffer(t *testing.T) {
	for _, c := range []struct {
		name                 string
		clientSR, serverSR   bool
		clientSeg, serverSeg int
		want                 bool
		wantSeg              int
		serverSays           string // the server's offer after its version's NUL
	}{
		{"both", true, true, 0, 0, true, 0, "tbsr\x00"},
		{"both, segments", true, true, 61440, 32768, true, 32768, "tbsr=32\x00"},
		{"client only", true, false, 0, 0, false, 0, "tbw\x00"},
		{"server only", false, true, 0, 0, false, 0, "tbw\x00"},
		{"server only, segments", false, true, 61440, 61440, false, 61440, "tbseg=60\x00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, sv, _, svOut := exchangeVersionsWith(t, func(cl, sv *Comm) {
				cl.OfferWindow, sv.OfferWindow = true, true
				cl.OfferSelective, sv.OfferSelective = c.clientSR, c.serverSR
				cl.OfferSegment, sv.OfferSegment = c.clientSeg, c.serverSeg
			})
			if cl.PeerSelective != c.want || sv.PeerSelective != c.want {
				t.Fatalf("selective retransmission agreed: client %v, server %v, want %v", cl.PeerSelective, sv.PeerSelective, c.want)
			}
			if !cl.PeerWindow || !sv.PeerWindow || cl.PeerSegment != c.wantSeg || sv.PeerSegment != c.wantSeg {
				t.Fatalf("window %v/%v, segment %d/%d: want the window and %d", cl.PeerWindow, sv.PeerWindow, cl.PeerSegment, sv.PeerSegment, c.wantSeg)
			}
			if got := string(svOut[len(Version)+1:]); !strings.HasPrefix(got, c.serverSays) {
				t.Fatalf("server's offer %q, want %q…", got, c.serverSays)
			}
		})
	}
	for _, tc := range []struct {
		in         string
		seg        int
		window, sr bool
	}{
		{"6.06\x00tbsr\x00\x00\x00\x00\x00\x00\x00", 0, true, true},
		{"6.06\x00tbsr=60\x00\x00tq", 61440, true, true},
		{"6.06\x00tbsr=60", 61440, true, true},
		{"6.06\x00tbsr=61\x00", 0, false, false},
		{"6.06\x00tbsr=\x00", 0, false, false},
		{"6.06\x00tbsr", 0, false, false},
		{"6.06\x00tbsrx\x00", 0, false, false},
		{"6.06\x00tbseg=8\x00", 8192, true, false},
	} {
		seg, w, sr := parseOffer([]byte(tc.in))
		if seg != tc.seg || w != tc.window || sr != tc.sr {
			t.Errorf("parseOffer(%q) = %d, %v, %v; want %d, %v, %v", tc.in, seg, w, sr, tc.seg, tc.window, tc.sr)
		}
	}
}

// hasWindowOffer reports whether a version message carries the window
// offer, or one that implies it (a segment or a selective offer).
func hasWindowOffer(b []byte) bool {
	_, w, _ := parseOffer(b)
	return w
}

// parseSegOffer returns the segment size in bytes offered in a version
// message (after the version's NUL), or 0 when there is none or it is not
// a multiple of 4 KiB from 8 KiB to 60 KiB.
func parseSegOffer(b []byte) int {
	seg, _, _ := parseOffer(b)
	return seg
}
