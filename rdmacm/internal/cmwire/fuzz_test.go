package cmwire_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false,
	"rewrite the rxe-* seed files under testdata/fuzz/ from the rdma_rxe captures")

// The seed corpora live in testdata/fuzz/FuzzXxx/. The rxe-* files are the
// captured CM MADs (and their CMA headers), written by TestWriteFuzzSeeds
// with -write-fuzz-seeds; the f.Add calls add synthetic edge cases.

// FuzzCMMessage: ParseMessage returns an error or a message, never both;
// it never modifies its input; an accepted MAD re-encodes to its input
// through Fields, and a rejected one has a named reason.
func FuzzCMMessage(f *testing.F) {
	for _, body := range []cmwire.Body{cmwire.REQFields{}, cmwire.MRAFields{}, cmwire.REJFields{}, cmwire.REPFields{},
		cmwire.RTUFields{}, cmwire.DREQFields{}, cmwire.DREPFields{}, cmwire.SIDRREQFields{}, cmwire.SIDRREPFields{}} {
		f.Add(cmwire.AppendMAD(nil, 1, body))
	}
	f.Add([]byte{})
	f.Add(make([]byte, wire.MADSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		m, n, err := cmwire.ParseMessage(data)
		if !bytes.Equal(in, data) {
			t.Fatal("ParseMessage modified its input")
		}
		if err != nil {
			if m != nil || n != 0 {
				t.Fatalf("error %v with a message (n %d)", err, n)
			}
			r := cmwire.ReasonOf(err)
			if r == cmwire.ReasonNone || r >= cmwire.ReasonCMAVersion {
				t.Fatalf("error %v has reason %v", err, r)
			}
			if (r == cmwire.ReasonShort) != errors.Is(err, wire.ErrShortPacket) {
				t.Fatalf("error %v: reason %v, errors.Is(ErrShortPacket) disagrees", err, r)
			}
			return
		}
		if n != wire.MADSize || len(m) != wire.MADSize || !m.Attr().Known() {
			t.Fatalf("accepted n %d len %d attr %v", n, len(m), m.Attr())
		}
		body := m.BodyFields()
		if body == nil || body.AttrID() != m.Attr() {
			t.Fatalf("attr %v: body %T", m.Attr(), body)
		}
		if enc := m.Fields().Append(nil); !bytes.Equal(enc, data[:wire.MADSize]) {
			t.Fatalf("re-encode differs:\n got %x\nwant %x", enc, data[:wire.MADSize])
		}
		// A REQ or SIDR_REQ's private data may or may not hold a valid
		// CMA header; either way its parser must behave.
		switch m.Attr() {
		case cmwire.AttrREQ:
			checkCMA(t, m.REQ().PrivateData())
		case cmwire.AttrSIDRREQ:
			checkCMA(t, m.SIDRREQ().PrivateData())
		}
	})
}

// FuzzCMAHeader: ParseCMAHeader returns an error or a header, never both,
// and an accepted header re-encodes to its input.
func FuzzCMAHeader(f *testing.F) {
	f.Add(cmwire.NewCMAHeader(0xd1ea, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")).Append(nil))
	f.Add(cmwire.NewCMAHeader(1, netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::ffff:1.2.3.4")).Append(nil))
	f.Add([]byte{0, 0x40})
	f.Add(make([]byte, cmwire.CMAHeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) { checkCMA(t, data) })
}

func checkCMA(t *testing.T, data []byte) {
	t.Helper()
	in := bytes.Clone(data)
	h, n, err := cmwire.ParseCMAHeader(data)
	if !bytes.Equal(in, data) {
		t.Fatal("ParseCMAHeader modified its input")
	}
	if err != nil {
		if h != nil || n != 0 {
			t.Fatalf("error %v with a header", err)
		}
		switch r := cmwire.ReasonOf(err); r {
		case cmwire.ReasonShort, cmwire.ReasonCMAVersion, cmwire.ReasonCMAIPVersion, cmwire.ReasonCMAAddress:
		default:
			t.Fatalf("error %v has reason %v", err, r)
		}
		return
	}
	f := h.Fields()
	if n != cmwire.CMAHeaderSize || f.Version != cmwire.CMAVersion || (f.IPVersion != 4 && f.IPVersion != 6) {
		t.Fatalf("accepted %+v (n %d)", f, n)
	}
	if f.IPVersion == 4 && (!f.Src.Is4() || !f.Dst.Is4()) {
		t.Fatalf("IPv4 header with addresses %v %v", f.Src, f.Dst)
	}
	if enc := f.Append(nil); !bytes.Equal(enc, data[:cmwire.CMAHeaderSize]) {
		t.Fatalf("re-encode differs:\n got %x\nwant %x", enc, data[:cmwire.CMAHeaderSize])
	}
}

// TestWriteFuzzSeeds writes the captured MADs and their CMA headers as
// seed inputs with -write-fuzz-seeds; otherwise it checks that they are
// committed and up to date.
func TestWriteFuzzSeeds(t *testing.T) {
	files := map[string][]byte{} // path -> contents
	for _, c := range capturedMADs(t) {
		m, _, err := cmwire.ParseMessage(c.mad)
		if err != nil {
			t.Fatal(err)
		}
		base := fmt.Sprintf("rxe-%s-%d-%s", c.file[:len(c.file)-len(".pcap")], c.frame, m.Attr())
		files[filepath.Join("FuzzCMMessage", base)] = seedFile(c.mad)
		if m.Attr() == cmwire.AttrREQ {
			files[filepath.Join("FuzzCMAHeader", base)] = seedFile(m.REQ().PrivateData()[:cmwire.CMAHeaderSize])
		}
	}
	for name, want := range files {
		path := filepath.Join("testdata", "fuzz", name)
		if *writeFuzzSeeds {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (run go test -run TestWriteFuzzSeeds -write-fuzz-seeds)", err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date (run go test -run TestWriteFuzzSeeds -write-fuzz-seeds)", path)
		}
	}
}

func seedFile(b []byte) []byte { return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b) }
