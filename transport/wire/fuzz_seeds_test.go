package wire_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/transport/wire"
)

var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false,
	"rewrite the rxe-* seed files under testdata/fuzz/ from the rdma_rxe captures")

// seedSet collects distinct seeds for one fuzz target.
type seedSet struct {
	target string
	max    int
	names  []string
	files  map[string]string // name -> file contents
	seen   map[string]bool
}

func (s *seedSet) add(name string, args ...any) {
	if len(s.names) >= s.max {
		return
	}
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		default:
			panic(fmt.Sprintf("seed type %T", a))
		}
	}
	text := b.String()
	if s.seen[text] {
		return
	}
	s.seen[text] = true
	s.names = append(s.names, name)
	s.files[name] = text
}

// TestWriteFuzzSeeds cuts seed inputs for every fuzz target out of real
// rdma_rxe packets. It only runs with -write-fuzz-seeds; otherwise it
// checks that every target has committed rxe-* seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	targets := []string{"FuzzPacket", "FuzzBTH", "FuzzRETH", "FuzzAETH", "FuzzAtomicETH",
		"FuzzAtomicAckETH", "FuzzImmDt", "FuzzIETH", "FuzzDETH", "FuzzMAD", "FuzzRecoverIPv4ID"}
	if !*writeFuzzSeeds {
		for _, target := range targets {
			m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "rxe-*"))
			if len(m) == 0 {
				t.Errorf("no rxe-* seeds for %s (run go test -run TestWriteFuzzSeeds -write-fuzz-seeds)", target)
			}
		}
		return
	}
	sets := map[string]*seedSet{}
	// Every target gets up to 24 seeds (FuzzPacket up to 64).
	for _, target := range targets {
		sets[target] = &seedSet{target: target, max: 24, files: map[string]string{}, seen: map[string]bool{}}
	}
	sets["FuzzPacket"].max = 64
	files, pkts := rxeCaptures(t)
	bigSeen := map[wire.Opcode]bool{}
	opSeen := map[string]bool{}
	for _, file := range files {
		base := strings.TrimSuffix(filepath.Base(file), ".pcap")
		for _, c := range pkts[file] {
			var p wire.Packet
			if err := p.Parse(c.roce); err != nil {
				t.Fatalf("%s frame %d: %v", file, c.frame, err)
			}
			op := p.Opcode()
			name := fmt.Sprintf("rxe-%s-%d", base, c.frame)
			key := fmt.Sprintf("%s/%v", file, op)
			if p.BTH.DestQP() == wire.QPNGSI {
				m, _, _ := wire.ParseMAD(p.Payload)
				key += fmt.Sprintf("/%#x", m.AttributeID())
				sets["FuzzMAD"].add(name, bytes.Clone(p.Payload))
			}
			// Header seeds: every distinct header value, up to the cap.
			if p.RETH != nil {
				sets["FuzzRETH"].add(name, []byte(p.RETH))
			}
			if p.AETH != nil {
				sets["FuzzAETH"].add(name, []byte(p.AETH))
			}
			if p.AtomicETH != nil {
				sets["FuzzAtomicETH"].add(name, []byte(p.AtomicETH))
			}
			if p.AtomicAckETH != nil {
				sets["FuzzAtomicAckETH"].add(name, []byte(p.AtomicAckETH))
			}
			if p.DETH != nil {
				sets["FuzzDETH"].add(name, []byte(p.DETH))
			}
			// No capture carries ImmDt or IETH: seed those with real
			// 32-bit words (the BTH's AckReq+PSN word, the ICRC trailer).
			sets["FuzzImmDt"].add(name+"-psn", c.roce[8:12])
			sets["FuzzIETH"].add(name+"-icrc", p.ICRC)

			// Whole packets, BTHs and ICRC differences: one packet per
			// capture and opcode (and MAD attribute), full-MTU packets only
			// once per opcode, to keep the corpus small.
			if opSeen[key] {
				continue
			}
			opSeen[key] = true
			if len(c.roce) <= 1100 || !bigSeen[op] {
				bigSeen[op] = bigSeen[op] || len(c.roce) > 1100
				sets["FuzzPacket"].add(name, c.roce)
			}
			sets["FuzzBTH"].add(name, []byte(p.BTH))
			body := c.roce[:len(c.roce)-wire.ICRCSize]
			diff := wire.ICRC(c.src, c.dst, 0, body) ^ wire.Trailer(c.roce)
			sets["FuzzRecoverIPv4ID"].add(name, diff, len(body))
		}
	}
	for _, target := range targets {
		s := sets[target]
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "rxe-*"))
		for _, f := range old {
			os.Remove(f)
		}
		for _, name := range s.names {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s.files[name]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: %d seeds", target, len(s.names))
	}
}
