package perf

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// exchange runs ExchangeVersions and one system data exchange on both
// ends of a pipe (the latter shows the streams stay in step).
func exchange(t *testing.T, client, server *Comm) (cerr, serr error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := server.ExchangeVersions()
		if err == nil {
			_, _, err = server.ExchangeSysData(4096, 64)
		}
		done <- err
	}()
	_, cerr = client.ExchangeVersions()
	if cerr == nil {
		_, _, cerr = client.ExchangeSysData(4096, 64)
	}
	return cerr, <-done
}

// rw writes into w and reads from r.
type rw struct {
	w *bytes.Buffer
	r *bytes.Reader
}

func (x rw) Write(b []byte) (int, error) { return x.w.Write(b) }
func (x rw) Read(b []byte) (int, error)  { return x.r.Read(b) }

func TestTestHint(t *testing.T) {
	const hint = "tbtest=write-bw s=65536 n=5000 a=0 t=128 Q=100 r=0 o=0 A=FETCH_AND_ADD"
	for _, c := range []struct {
		name           string
		hint           string
		ask            bool
		offerC, offerS int
		wantHint       string
		wantSeg        int
	}{
		{"serve asks", hint, true, 0, 0, hint, 0},
		{"with a segment offer", hint, true, 61440, 0, hint, 0},
		{"one-test server ignores it", hint, false, 0, 0, "", 0},
		{"one-test server, segments agreed", hint, false, 61440, 32768, "", 32768},
		{"client without hint", "", true, 0, 0, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			cl, sv := NewComm(a, false), NewComm(b, true)
			cl.Hint, cl.OfferSegment = c.hint, c.offerC
			sv.AskHint, sv.OfferSegment = c.ask, c.offerS
			if cerr, serr := exchange(t, cl, sv); cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			if !c.ask && sv.Hint != "" || c.ask && sv.Hint != c.wantHint {
				t.Errorf("server got hint %q, want %q", sv.Hint, c.wantHint)
			}
			if cl.PeerSegment != c.wantSeg || cl.RemoteVersion != Version || sv.RemoteVersion != Version {
				t.Errorf("segment %d (want %d), versions %q %q", cl.PeerSegment, c.wantSeg, cl.RemoteVersion, sv.RemoteVersion)
			}
		})
	}
}

// TestTestHintMessages pins the bytes: the marker in the version
// message's last two bytes, after a segment offer's NUL.
func TestTestHintMessages(t *testing.T) {
	var w bytes.Buffer
	c := NewComm(rw{&w, bytes.NewReader(make([]byte, 16))}, false)
	c.Hint, c.OfferSegment = "x", 61440
	if _, err := c.ExchangeVersions(); err == nil || !strings.Contains(err.Error(), "not a perftest version") {
		t.Fatalf("zero answer: %v", err)
	}
	if want := "6.06\x00tbseg=60\x00tq"; w.String() != want {
		t.Errorf("version message %q, want %q (no hint sent without \"th\")", w.String(), want)
	}
}

func TestTestHintHostile(t *testing.T) {
	ask := make([]byte, 16)
	copy(ask, "6.06")
	offer := append([]byte(nil), ask...)
	copy(offer[14:], "tq")
	for _, in := range [][]byte{
		append(offer, 0, 0),            // empty hint
		append(offer, 0xff, 0xff, 'x'), // too long
		append(offer, 0, 10, 'a', 'b'), // cut short
		offer,                          // nothing after the offer
	} {
		var w bytes.Buffer
		c := NewComm(rw{&w, bytes.NewReader(in)}, true)
		c.AskHint = true
		if _, err := c.ExchangeVersions(); err == nil {
			t.Errorf("%q: no error, hint %q", in, c.Hint)
		}
	}
}

func TestReadPingpongDone(t *testing.T) {
	for _, c := range []struct {
		in, hint string
		ok       bool
	}{
		{"done\x00", "", true},
		{"done\x00\x00\x03abc", "abc", true},
		{"done\x00\x00\x05abc", "", false},
		{"done\x00\x00\x00", "", false},
		{"done\x00\x02", "", false},
		{"nope\x00", "", false},
		{"do", "", false},
	} {
		h, err := ReadPingpongDone(strings.NewReader(c.in))
		if (err == nil) != c.ok || h != c.hint {
			t.Errorf("%q: %q, %v", c.in, h, err)
		}
	}
	// To "tbrdma serve" (its address carries ServeLID): done + hint.
	var w bytes.Buffer
	rem := PingpongDest{LID: ServeLID, QPN: 0x11, PSN: 0x22}
	if _, err := PingpongClientExchangeHint(rw{&w, bytes.NewReader(rem.Marshal())}, PingpongDest{}, "tbtest=pingpong s=1"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.String(), "done\x00\x00\x13tbtest=pingpong s=1") {
		t.Errorf("client wrote %q", w.String())
	}
	// To a stock server (LID 0000): exactly "done" and its NUL, which is
	// all rdma-core's ibv_rc_pingpong server accepts (its read must return
	// 5 bytes; interop showed it failing on the hint).
	w.Reset()
	rem.LID = 0
	if _, err := PingpongClientExchangeHint(rw{&w, bytes.NewReader(rem.Marshal())}, PingpongDest{}, "tbtest=pingpong s=1"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.String(), "0\x00done\x00") || strings.Contains(w.String(), "tbtest") {
		t.Errorf("client wrote %q to a stock server, want its address then exactly \"done\\x00\"", w.String())
	}
}
