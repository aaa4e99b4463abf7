package perf

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRefusalAfterHint: a server that read a client's hint refuses it in
// place of its system data; the client's next read returns the reason.
func TestRefusalAfterHint(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	cl, sv := NewComm(a, false), NewComm(b, true)
	cl.Hint = "tbtest=read-lat s=2 n=1000 a=1 t=1 Q=0 r=0 o=128 A=FETCH_AND_ADD"
	sv.AskHint = true
	const reason = "the client runs read-lat -a, this server write-bw -s 65536: start the server with the client's flags, or use tbrdma serve"
	done := make(chan error, 1)
	go func() {
		if _, err := sv.ExchangeVersions(); err != nil {
			done <- err
			return
		}
		if sv.Hint != cl.Hint {
			t.Errorf("server got hint %q", sv.Hint)
		}
		done <- Refuse(b, reason, time.Second)
	}()
	if _, err := cl.ExchangeVersions(); err != nil {
		t.Fatal(err)
	}
	_, _, err := cl.ExchangeSysData(4096, 64)
	var ref *RefusedError
	if !errors.As(err, &ref) || ref.Reason != reason {
		t.Fatalf("client got %v, want the refusal %q", err, reason)
	}
	a.Close()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestReadFullRefusal covers the message sizes of the exchanges: a refusal
// longer or shorter than the message being read, a connection that ends
// inside the prefix, and messages that only look alike.
func TestReadFullRefusal(t *testing.T) {
	line := RefusalPrefix + "why\n"
	for _, c := range []struct {
		name   string
		in     string
		n      int
		reason string // "" for no refusal
		err    bool
	}{
		{"MTU message", line + "junk", 2, "why", false},
		{"system data", line, 4, "why", false},
		{"version", line, 16, "why", false},
		{"key message", line, 108, "why", false},
		{"no newline", RefusalPrefix + "cut", 108, "cut", false},
		{"control bytes", RefusalPrefix + "a\x00b\x1b\n", 20, "a?b?", false},
		{"prefix cut", RefusalPrefix[:5], 16, "", true},
		{"a version", "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 16, "", false},
		{"an MTU", "5\x00", 2, "", false},
		{"t alone", "t\x00", 2, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, c.n)
			err := readFull(strings.NewReader(c.in), b)
			var ref *RefusedError
			switch {
			case c.reason != "":
				if !errors.As(err, &ref) || ref.Reason != c.reason {
					t.Errorf("got %v, want the refusal %q", err, c.reason)
				}
			case c.err:
				if err == nil || IsRefused(err) {
					t.Errorf("got %v, want a read error", err)
				}
			default:
				if err != nil || !bytes.Equal(b, []byte(c.in)) {
					t.Errorf("got %v, %q; want the message", err, b)
				}
			}
		})
	}
}

// TestRefusalToOldPeer: a peer that does not know refusals (perftest, an
// older tbrdma) reads the first 16 bytes of one as the server's version:
// no NUL in them and not a number, so it fails at once, quoting the text.
func TestRefusalToOldPeer(t *testing.T) {
	v := RefusalPrefix[:versionLen]
	if strings.IndexByte(v, 0) >= 0 {
		t.Fatalf("%q has a NUL", v)
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		t.Fatalf("%q parses as a version", v)
	}
}

// TestPingpongServerSeesPerftest: a pingpong server reads only a perftest
// client's 16-byte version and can refuse it; the client sees the reason.
func TestPingpongServerSeesPerftest(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := PingpongServerExchangeHint(b, PingpongDest{}, func(PingpongDest) error { return nil })
		if !errors.Is(err, ErrNotPingpong) {
			done <- err
			return
		}
		done <- Refuse(b, "not pingpong", time.Second)
	}()
	c := NewComm(a, false)
	_, err := c.ExchangeVersions()
	if !IsRefused(err) || !strings.Contains(err.Error(), "not pingpong") {
		t.Fatalf("client: %v", err)
	}
	a.Close()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestPingpongCheckLID: a one-test pingpong server reads the hint of a
// tbrdma client and answers it; a refusal reaches the client, an
// acceptance lets it go on, and a client without a hint is not asked.
func TestPingpongCheckLID(t *testing.T) {
	for _, c := range []struct {
		name, hint string
		refuse     bool
	}{
		{"accepted", "tbtest=pingpong s=1 n=1 m=1024 c=0 ud=0", false},
		{"refused", "tbtest=pingpong s=2 n=1 m=1024 c=0 ud=0", true},
		{"no hint", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := tcpPair(t)
			defer a.Close()
			done := make(chan error, 1)
			go func() {
				_, hint, err := PingpongServerExchangeHint(b, PingpongDest{QPN: 7}, func(PingpongDest) error { return nil })
				switch {
				case err != nil:
				case hint != c.hint:
					err = errors.New("server got hint " + hint)
				case hint == "":
					b.Close()
				case c.refuse:
					err = Refuse(b, "sizes differ", time.Second)
				default:
					err = PingpongAccept(b)
				}
				done <- err
			}()
			rem, err := PingpongClientExchangeHint(a, PingpongDest{QPN: 9}, c.hint)
			if c.refuse {
				if !IsRefused(err) {
					t.Errorf("client: %v, want the refusal", err)
				}
				a.Close()
			} else if err != nil || rem.QPN != 7 || rem.LID != 0 {
				t.Errorf("client: %+v, %v", rem, err)
			}
			if c.hint == "" {
				a.Close()
			}
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
}

// tcpPair returns the two ends of a TCP connection on loopback (buffered,
// as the exchanges are, unlike net.Pipe).
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		c <- s
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-c
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestReportFromAnotherTest: a bandwidth server that reads a key message
// where the client's report belongs (the client runs a latency test) says
// so instead of printing a row of nonsense and waiting.
func TestReportFromAnotherTest(t *testing.T) {
	key := Dest{OutReads: 128, QPN: 0x11, PSN: 0x22, RKey: 0x33, VAddr: 0x44}.MarshalKey()
	var w bytes.Buffer
	c := NewComm(rw{&w, bytes.NewReader(key)}, true)
	if _, err := c.ExchangeBWReport(BWReport{}); err == nil || !strings.Contains(err.Error(), "another test") {
		t.Errorf("server read a key message as a report: %v", err)
	}
	// A server's report of zeros is fine for the client.
	var w2 bytes.Buffer
	c = NewComm(rw{&w2, bytes.NewReader(make([]byte, 40))}, false)
	if _, err := c.ExchangeBWReport(BWReport{Size: 8, Iters: 5}); err != nil {
		t.Errorf("client: %v", err)
	}
}
