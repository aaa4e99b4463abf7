// Command icrccheck reads pcap files and checks the ICRC of every RoCEv2
// packet (UDP destination port 4791) against the IP and UDP headers as they
// were captured. It prints, per file, the packet count per direction and
// BTH opcode, the first packet whose ICRC is wrong (with its headers in
// hex), and exits 1 if any ICRC was wrong, a packet did not parse, or a
// file held no RoCEv2 packet at all.
//
// Usage: icrccheck [-q] FILE.pcap...
package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

type result struct {
	roce, bad, malformed int
	counts               map[string]int // "src -> dst opcode" -> packets
	firstBad             string
}

func check(path string) (*result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := sniff.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res := &result{counts: map[string]int{}}
	for n := 1; ; n++ {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%s: frame %d: %w", path, n, err)
		}
		ip, udp, payload, src, dst, ok := sniff.DecodeUDP(p.LinkType, p.Data)
		if !ok || dst.Port() != wire.UDPPort {
			continue
		}
		res.roce++
		var pkt wire.Packet
		if err := pkt.Parse(payload); err != nil {
			res.malformed++
			if res.firstBad == "" {
				res.firstBad = fmt.Sprintf("frame %d %v -> %v: does not parse: %v\n  payload %s", n, src, dst, err, hex.EncodeToString(payload))
			}
			continue
		}
		res.counts[fmt.Sprintf("%-15v -> %-15v %v", src.Addr(), dst.Addr(), pkt.Opcode())]++
		want, ok := wire.ICRCFromHeaders(ip, udp, payload[:len(payload)-wire.ICRCSize])
		got := binary.LittleEndian.Uint32(payload[len(payload)-wire.ICRCSize:])
		if !ok || want != got {
			res.bad++
			if res.firstBad == "" {
				res.firstBad = describe(n, src, dst, &pkt, ip, udp, payload, want, got)
			}
		}
	}
}

func describe(n int, src, dst netip.AddrPort, pkt *wire.Packet, ip, udp, payload []byte, want, got uint32) string {
	return fmt.Sprintf("frame %d %v -> %v %v PSN %v QPN %v: ICRC %#08x, want %#08x\n  ip  %s\n  udp %s\n  bth %s",
		n, src, dst, pkt.Opcode(), pkt.BTH.PSN(), pkt.BTH.DestQP(), got, want,
		hex.EncodeToString(ip), hex.EncodeToString(udp), hex.EncodeToString(payload[:min(len(payload), 32)]))
}

func main() {
	quiet := flag.Bool("q", false, "print only the summary line of each file")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: icrccheck [-q] FILE.pcap...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		res, err := check(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "icrccheck: %v\n", err)
			failed = true
			if res == nil {
				continue
			}
		}
		verdict := "ok"
		switch {
		case res.roce == 0:
			verdict = "FAIL (no RoCEv2 packets)"
		case res.bad > 0 || res.malformed > 0:
			verdict = "FAIL"
		}
		if verdict != "ok" {
			failed = true
		}
		fmt.Printf("%s: %d RoCEv2 packets, %d bad ICRC, %d malformed: %s\n", path, res.roce, res.bad, res.malformed, verdict)
		if !*quiet {
			keys := make([]string, 0, len(res.counts))
			for k := range res.counts {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Printf("  %5d  %s\n", res.counts[k], k)
			}
		}
		if res.firstBad != "" {
			fmt.Printf("  first bad packet: %s\n", res.firstBad)
		}
	}
	if failed {
		os.Exit(1)
	}
}
