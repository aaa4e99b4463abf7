package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"

	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// result is what check found in one capture.
type result struct {
	frames               int            // every frame in the file, RoCEv2 or not
	roce, bad, malformed int            // RoCEv2 packets, bad ICRCs, unparsable packets
	counts               map[string]int // "src -> dst opcode" -> packets
	firstBad             string

	// With a "from" address (the implementation under test; the other end
	// is rxe): its packets and what went wrong with them, in frame order.
	from                     netip.Addr
	sent, received           int
	sentBad, sentUnparsable  int
	sentMalformed            int // frames tshark flagged (see check's malformed)
	sentResent, peerResent   int
	naksFromPeer, naksToPeer int
	problems                 []problem
	lastSent, lastReceived   string
	otherMalformed           int // tshark-flagged frames not sent by from
	missingMalformed         []int
}

// problem is one packet of the implementation under test that differs from
// what the peer expects.
type problem struct {
	frame  int    // the frame it is about (sorting key)
	what   string // the packet: frame, addresses, opcode, PSN, QPN
	reason string
}

func (p problem) String() string { return p.what + ": " + p.reason }

// reqKey identifies a request packet for retransmission detection.
type reqKey struct {
	qpn wire.QPN
	psn wire.PSN
	op  wire.Opcode
}

// sentReq is a request the implementation under test sent.
type sentReq struct {
	frame int
	what  string
}

func describePacket(n int, src, dst netip.AddrPort, pkt *wire.Packet) string {
	return fmt.Sprintf("frame %d %v -> %v %v PSN %v QPN %v, %d payload bytes", n, src.Addr(), dst.Addr(), pkt.Opcode(), pkt.BTH.PSN(), pkt.BTH.DestQP(), len(pkt.Payload))
}

// check reads the pcap at path and checks every RoCEv2 packet (UDP
// destination port 4791): it parses, and its ICRC matches the IP and UDP
// headers as captured. If from is valid, it also follows that address's
// packets: a request it sends again (same QPN, PSN and opcode), an ACK
// with a NAK or RNR syndrome from the peer (attributed to the request with
// the NAK's PSN) or to the peer, and the frames listed in malformed (frame
// numbers tshark reported as malformed) sent by it.
func check(rd io.Reader, path string, from netip.Addr, malformed []int) (*result, error) {
	r, err := sniff.NewReader(rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	bad := map[int]bool{}
	for _, n := range malformed {
		bad[n] = true
	}
	res := &result{counts: map[string]int{}, from: from}
	sentReqs := map[reqKey]sentReq{} // requests from "from", by key
	peerReqs := map[reqKey]bool{}    // requests from the peer
	byPSN := map[wire.PSN]sentReq{}  // the last request from "from" with a PSN
	defer func() {
		for n := range bad {
			if n > res.frames {
				res.missingMalformed = append(res.missingMalformed, n)
			}
		}
		sort.Ints(res.missingMalformed)
		sort.SliceStable(res.problems, func(i, j int) bool { return res.problems[i].frame < res.problems[j].frame })
	}()
	for n := 1; ; n++ {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%s: frame %d: %w", path, n, err)
		}
		res.frames = n
		ip, udp, payload, src, dst, ok := sniff.DecodeUDP(p.LinkType, p.Data)
		mine := from.IsValid() && ok && src.Addr() == from
		if bad[n] {
			if mine {
				res.sentMalformed++
			} else {
				res.otherMalformed++
			}
		}
		if !ok || dst.Port() != wire.UDPPort {
			continue
		}
		res.roce++
		if from.IsValid() {
			if mine {
				res.sent++
			} else {
				res.received++
			}
		}
		var pkt wire.Packet
		if err := pkt.Parse(payload); err != nil {
			res.malformed++
			if res.firstBad == "" {
				res.firstBad = fmt.Sprintf("frame %d %v -> %v: does not parse: %v\n  payload %s", n, src, dst, err, hex.EncodeToString(payload))
			}
			if mine {
				res.sentUnparsable++
				res.problems = append(res.problems, problem{n, fmt.Sprintf("frame %d %v -> %v", n, src.Addr(), dst.Addr()),
					fmt.Sprintf("does not parse as RoCEv2 (%v); rxe drops such a packet", err)})
			}
			continue
		}
		what := describePacket(n, src, dst, &pkt)
		op := pkt.Opcode()
		res.counts[fmt.Sprintf("%-15v -> %-15v %v", src.Addr(), dst.Addr(), op)]++
		want, icrcOK := wire.ICRCFromHeaders(ip, udp, payload[:len(payload)-wire.ICRCSize])
		got := binary.LittleEndian.Uint32(payload[len(payload)-wire.ICRCSize:])
		if !icrcOK || want != got {
			res.bad++
			if res.firstBad == "" {
				res.firstBad = fmt.Sprintf("%s: ICRC %#08x, want %#08x\n  ip  %s\n  udp %s\n  bth %s",
					what, got, want, hex.EncodeToString(ip), hex.EncodeToString(udp), hex.EncodeToString(payload[:min(len(payload), 32)]))
			}
			if mine {
				res.sentBad++
				res.problems = append(res.problems, problem{n, what,
					fmt.Sprintf("ICRC %#08x, want %#08x: rxe drops it silently", got, want)})
			}
		}
		if bad[n] && mine {
			res.problems = append(res.problems, problem{n, what, "tshark reports it as malformed"})
		}
		if !from.IsValid() {
			continue
		}
		if mine {
			res.lastSent = what
		} else {
			res.lastReceived = what
		}
		key := reqKey{pkt.BTH.DestQP(), pkt.BTH.PSN(), op}
		isReq := op.Has(wire.IsRequest)
		switch {
		case isReq && mine:
			if first, seen := sentReqs[key]; seen {
				res.sentResent++
				res.problems = append(res.problems, problem{n, what,
					fmt.Sprintf("sent again (first in frame %d): rxe did not acknowledge it in time", first.frame)})
			} else {
				sentReqs[key] = sentReq{n, what}
			}
			byPSN[key.psn] = sentReq{n, what}
		case isReq:
			if peerReqs[key] {
				res.peerResent++
			}
			peerReqs[key] = true
		}
		if pkt.AETH == nil {
			continue
		}
		syn := pkt.AETH.Syndrome()
		if syn.IsACK() {
			continue
		}
		if mine {
			res.naksToPeer++
			res.problems = append(res.problems, problem{n, what,
				fmt.Sprintf("tbrdma answered rxe's request with %v", syn)})
			continue
		}
		res.naksFromPeer++
		psn := pkt.BTH.PSN()
		if req, ok := byPSN[psn]; ok {
			res.problems = append(res.problems, problem{req.frame, req.what,
				fmt.Sprintf("rxe answered it with %v in frame %d", syn, n)})
		} else {
			res.problems = append(res.problems, problem{n, what,
				fmt.Sprintf("rxe sent %v for PSN %v, which tbrdma had not sent (its last packet: %s)", syn, psn, orNone(res.lastSent))})
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
