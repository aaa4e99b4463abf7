package cli

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/verbs"
)

// runSegmentPair runs a tbrdma server and client of kind k on fresh
// loopback addresses, with their own extra arguments, and returns the
// client's buffer after the run, both stderrs and both contexts (closed
// by then; their counters remain).
func runSegmentPair(t *testing.T, k *perftestKind, sargs, cargs []string) (cbuf []byte, serr, cerr string, sctx, cctx *verbs.Context) {
	t.Helper()
	sa, ca := loopbackAddr(), loopbackAddr()
	sf, _, se := testFactory()
	cf, _, ce := testFactory()
	capture := func(f *Factory, dst **verbs.Context) {
		open := f.OpenDevice
		f.OpenDevice = func(a netip.Addr) (*verbs.Context, error) {
			c, err := open(a)
			*dst = c
			return c, err
		}
	}
	capture(sf, &sctx)
	capture(cf, &cctx)
	so := parsePerftest(t, sf, k, append([]string{"--bind", sa.String(), "-p", "0"}, sargs...)...)
	pair(t, func(l func(net.Addr)) error {
		so.Listening = l
		return runPerftest(context.Background(), so)
	}, func(port int) error {
		co := parsePerftest(t, cf, k, append([]string{"--bind", ca.String(), "-p", itoa(port), sa.String()}, cargs...)...)
		co.Inspect = func(b []byte) { cbuf = bytes.Clone(b) }
		return runPerftest(context.Background(), co)
	})
	return cbuf, se.String(), ce.String(), sctx, cctx
}

// Both sides pass --large-segments: they agree in the version exchange
// and move the data in segments far above 4096 bytes; the bytes READ are
// the server's pattern.
func TestPerftestLargeSegments(t *testing.T) {
	const size = 200000
	args := []string{"--large-segments", "-s", itoa(size), "-n", "20"}
	buf, serr, cerr, _, cctx := runSegmentPair(t, readBWTest, args, args)
	for _, s := range []string{serr, cerr} {
		if !strings.Contains(s, "large segments: 61440-byte packets, agreed with the peer") {
			t.Fatalf("stderr %q lacks the agreement note", s)
		}
	}
	for i := range size {
		if buf[i] != byte(i%251+1) {
			t.Fatalf("byte %d READ is %d, want the server's pattern %d", i, buf[i], byte(i%251+1))
		}
	}
	st := cctx.TransportStats()
	if st.PacketsIn == 0 || st.BytesIn/st.PacketsIn < 8192 {
		t.Fatalf("client received %d bytes in %d packets: segments were not large", st.BytesIn, st.PacketsIn)
	}
	// --segment-size picks a smaller one; the smaller offer wins.
	_, serr, cerr, _, _ = runSegmentPair(t, writeBWTest, []string{"--large-segments", "-s", itoa(size), "-n", "20"},
		[]string{"--segment-size", "32768", "-s", itoa(size), "-n", "20"})
	if !strings.Contains(serr, "32768-byte packets") || !strings.Contains(cerr, "32768-byte packets") {
		t.Fatalf("stderrs %q / %q: want 32768-byte packets agreed", serr, cerr)
	}
}

// One side alone asks for large segments: the run uses the path MTU, works,
// and the side that asked says why.
func TestPerftestLargeSegmentsOneSided(t *testing.T) {
	const size = 100000
	plain := []string{"-s", itoa(size), "-n", "10"}
	large := append([]string{"--large-segments"}, plain...)
	for _, c := range []struct {
		name         string
		sargs, cargs []string
		noteOnServer bool
	}{
		{"client only", plain, large, false},
		{"server only", large, plain, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			buf, serr, cerr, sctx, cctx := runSegmentPair(t, readBWTest, c.sargs, c.cargs)
			asker, other := cerr, serr
			if c.noteOnServer {
				asker, other = serr, cerr
			}
			if !strings.Contains(asker, "the peer made no offer") {
				t.Fatalf("stderr of the side that asked %q lacks the fallback note", asker)
			}
			if strings.Contains(other, "large segments") {
				t.Fatalf("stderr of the other side mentions large segments: %q", other)
			}
			for i := range size {
				if buf[i] != byte(i%251+1) {
					t.Fatalf("byte %d READ is %d, want %d", i, buf[i], byte(i%251+1))
				}
			}
			for _, ctx := range []*verbs.Context{sctx, cctx} {
				if ctx.MaxSegmentSize() != 0 {
					t.Fatal("a context enabled large segments without an agreement")
				}
				st := ctx.TransportStats()
				if st.PacketsIn > 0 && st.BytesIn/st.PacketsIn > 4096+64 {
					t.Fatalf("%d bytes in %d packets: larger than the path MTU", st.BytesIn, st.PacketsIn)
				}
			}
		})
	}
}

func TestPerftestLargeSegmentsFlags(t *testing.T) {
	f, _, _ := testFactory()
	for _, args := range [][]string{
		{"--segment-size", "4096"}, {"--segment-size", "65536"}, {"--segment-size", "10000"},
		{"--large-segments", "-R"},
	} {
		cmd := newCmdPerftest(f, writeBWTest, func(*perftestOptions) error { return nil })
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o := parsePerftest(t, f, writeBWTest, "--segment-size", "32768")
	if !o.LargeSegments || o.SegmentSize != 32768 {
		t.Fatalf("--segment-size 32768: LargeSegments %v SegmentSize %d", o.LargeSegments, o.SegmentSize)
	}
}
