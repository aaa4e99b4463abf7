package cmwire_test

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// rxeDir holds the real rdma_rxe captures (see its MANIFEST.md).
const rxeDir = "../../../testdata/rxe"

// cmCaptureFiles are the captures with CM traffic: rping and
// ib_write_bw -R both connect through librdmacm and the kernel CM.
var cmCaptureFiles = []string{"rping.pcap", "write_bw_rdma_cm.pcap"}

// capMAD is one MAD sent to QP1 in a capture.
type capMAD struct {
	file     string
	frame    int // 1-based, as tshark counts
	src, dst netip.AddrPort
	mad      []byte // 256 bytes
}

var (
	capOnce sync.Once
	capMADs []capMAD
	capErr  error
)

// capturedMADs returns every MAD to QP1 in cmCaptureFiles, in capture
// order.
func capturedMADs(t testing.TB) []capMAD {
	t.Helper()
	capOnce.Do(func() {
		for _, name := range cmCaptureFiles {
			m, err := readMADs(name)
			if err != nil {
				capErr = err
				return
			}
			capMADs = append(capMADs, m...)
		}
	})
	if capErr != nil {
		t.Fatal(capErr)
	}
	if len(capMADs) == 0 {
		t.Fatal("no MADs in the captures")
	}
	return capMADs
}

func readMADs(name string) ([]capMAD, error) {
	f, err := os.Open(filepath.Join(rxeDir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := sniff.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	var out []capMAD
	for frame := 1; ; frame++ {
		p, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		_, _, payload, src, dst, ok := sniff.DecodeUDP(p.LinkType, bytes.Clone(p.Data))
		if !ok || dst.Port() != wire.UDPPort {
			continue
		}
		var pkt wire.Packet
		if err := pkt.Parse(payload); err != nil || pkt.BTH.DestQP() != wire.QPNGSI || pkt.Opcode() != wire.UDSendOnly {
			continue
		}
		out = append(out, capMAD{name, frame, src, dst, pkt.Payload})
	}
}
