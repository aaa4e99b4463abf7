package cmwire_test

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/sniff"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// testdata/udaddy.pcap is the interop pairing udaddy-tbserver of
// 2026-11-30 (interop/run.sh, docs/interop.md): the stock udaddy 44.0
// ("udaddy -s 198.18.0.1") in a Debian 12 guest on rdma_rxe
// (198.18.0.2) resolving "tbrdma udaddy -b 198.18.0.1" by SIDR, then the
// ten 100-byte datagrams each way. Frame 1 is the guest kernel's SIDR_REQ,
// frame 2 tbrdma's SIDR_REP (which the kernel accepted: the guest's
// udaddy went on to send to the QPN in it).
const udaddyCapture = "testdata/udaddy.pcap"

var (
	udaddyGuest = netip.MustParseAddr("198.18.0.2")
	udaddyHost  = netip.MustParseAddr("198.18.0.1")
)

// udaddyPackets returns the RoCEv2 packets of the udaddy capture, parsed,
// with their addresses.
func udaddyPackets(t *testing.T) (pkts []wire.Packet, src []netip.Addr) {
	t.Helper()
	f, err := os.Open(udaddyCapture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := sniff.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	for frame := 1; ; frame++ {
		p, err := r.Next()
		if err == io.EOF {
			return pkts, src
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _, payload, s, d, ok := sniff.DecodeUDP(p.LinkType, bytes.Clone(p.Data))
		if !ok || d.Port() != wire.UDPPort {
			t.Fatalf("frame %d is not RoCEv2", frame)
		}
		var pkt wire.Packet
		if err := pkt.Parse(payload); err != nil {
			t.Fatalf("frame %d: %v", frame, err)
		}
		pkts, src = append(pkts, pkt), append(src, s.Addr())
	}
}

// TestUdaddySIDRGolden decodes the SIDR_REQ and SIDR_REP of a real
// udaddy exchange field by field, re-encodes both to the captured bytes,
// and checks that the datagrams that follow use what the SIDR_REP said.
func TestUdaddySIDRGolden(t *testing.T) {
	pkts, src := udaddyPackets(t)
	if len(pkts) != 22 {
		t.Fatalf("%d packets, want 22: SIDR_REQ, SIDR_REP, 10 datagrams each way", len(pkts))
	}
	const (
		requestID = cmwire.CommID(0x520c1965)
		tid       = 0x0000000265190c52
		cmaPort   = 0xe131 // the guest's rdma_cm source port
		serverQPN = wire.QPN(0x11)
		clientQPN = wire.QPN(0x24)
	)
	for i, from := range []netip.Addr{udaddyGuest, udaddyHost} {
		p := pkts[i]
		if src[i] != from || p.Opcode() != wire.UDSendOnly || p.BTH.DestQP() != wire.QPNGSI || p.BTH.PKey() != 0xFFFF ||
			p.DETH.QKey() != wire.QKeyGSI || p.DETH.SrcQP() != wire.QPNGSI || len(p.Payload) != wire.MADSize {
			t.Fatalf("frame %d: from %v, %v to QP %v, P_Key %#x, DETH %+v, %d bytes: want a MAD from QP1 to QP1 from %v",
				i+1, src[i], p.Opcode(), p.BTH.DestQP(), p.BTH.PKey(), p.DETH.Fields(), len(p.Payload), from)
		}
	}

	// Frame 1: the guest kernel's SIDR_REQ.
	m, n, err := cmwire.ParseMessage(pkts[0].Payload)
	if err != nil || n != wire.MADSize || m.Attr() != cmwire.AttrSIDRREQ {
		t.Fatalf("frame 1: %v, %d bytes, %v", m.Attr(), n, err)
	}
	if h := m.MAD(); m.TransactionID() != tid || h.Status() != 0 || h.ClassSpecific() != 0 || h.AttributeModifier() != 0 {
		t.Errorf("frame 1 MAD header %+v, want TID %#x and zeros", h.Fields(), uint64(tid))
	}
	req := m.SIDRREQ()
	if req.RequestID() != requestID || req.PKey() != 0xFFFF || req.Reserved6() != 0 {
		t.Errorf("SIDR_REQ request ID %v, P_Key %#x, reserved %#x", req.RequestID(), req.PKey(), req.Reserved6())
	}
	// The kernel's SIDR_REQ TID is its REQ's: hi_tid, then the request ID
	// byte-swapped.
	if got := cmwire.KernelTID(2, req.RequestID()); got != tid {
		t.Errorf("KernelTID(2, %v) = %#x, want %#x", req.RequestID(), got, uint64(tid))
	}
	ps, port, ok := cmwire.SplitServiceID(req.ServiceID())
	if req.ServiceID() != 0x0000000001111c06 || !ok || ps != cmwire.PSUDP || port != 7174 || !cmwire.IsCMAServiceID(req.ServiceID()) {
		t.Errorf("SIDR_REQ service ID %#x = %v port %d (ok %v), want RDMA_PS_UDP port 7174", req.ServiceID(), ps, port, ok)
	}
	hdr, hn, err := cmwire.ParseCMAHeader(req.PrivateData())
	wantHdr := cmwire.CMAHeaderFields{Version: 0, IPVersion: 4, Port: cmaPort, Src: udaddyGuest, Dst: udaddyHost}
	if err != nil || hn != cmwire.CMAHeaderSize || hdr.Fields() != wantHdr {
		t.Errorf("SIDR_REQ CMA header %+v (%v), want %+v", hdr.Fields(), err, wantHdr)
	}
	if ud := req.UserData(); !bytes.Equal(ud, make([]byte, len(ud))) || len(ud) != cmwire.SIDRREQPrivateDataSize-cmwire.CMAHeaderSize {
		t.Errorf("SIDR_REQ user data (%d bytes) not zero: udaddy sends none: %x", len(ud), ud)
	}
	wantReq := cmwire.SIDRREQFields{RequestID: requestID, PKey: 0xFFFF, ServiceID: cmwire.ServiceID(cmwire.PSUDP, 7174)}
	wantHdr.Append(wantReq.PrivateData[:0])
	if got := req.Fields(); got != wantReq {
		t.Errorf("SIDR_REQ\n got %+v\nwant %+v", got, wantReq)
	}
	if enc := cmwire.AppendMAD(nil, tid, wantReq); !bytes.Equal(enc, pkts[0].Payload) {
		t.Errorf("SIDR_REQ re-encoded differs:\n got %x\nwant %x", enc, pkts[0].Payload)
	}

	// Frame 2: tbrdma's SIDR_REP, same TID and request ID.
	m, n, err = cmwire.ParseMessage(pkts[1].Payload)
	if err != nil || n != wire.MADSize || m.Attr() != cmwire.AttrSIDRREP || m.TransactionID() != tid {
		t.Fatalf("frame 2: %v TID %#x, %d bytes, %v", m.Attr(), m.TransactionID(), n, err)
	}
	rep := m.SIDRREP()
	if rep.RequestID() != requestID || rep.Status() != cmwire.SIDRSuccess || rep.AdditionalInfoLength() != 0 || rep.VendorID() != 0 {
		t.Errorf("SIDR_REP request ID %v status %v info length %d vendor %#x", rep.RequestID(), rep.Status(), rep.AdditionalInfoLength(), rep.VendorID())
	}
	if rep.QPN() != serverQPN || rep.ServiceID() != req.ServiceID() || rep.QKey() != cmwire.RDMAUDPQKey {
		t.Errorf("SIDR_REP QPN %v service ID %#x Q_Key %#x, want %v, the request's, %#x", rep.QPN(), rep.ServiceID(), uint32(rep.QKey()), serverQPN, uint32(cmwire.RDMAUDPQKey))
	}
	wantRep := cmwire.SIDRREPFields{RequestID: requestID, Status: cmwire.SIDRSuccess, QPN: serverQPN,
		ServiceID: cmwire.ServiceID(cmwire.PSUDP, 7174), QKey: cmwire.RDMAUDPQKey}
	if got := rep.Fields(); got != wantRep {
		t.Errorf("SIDR_REP\n got %+v\nwant %+v", got, wantRep)
	}
	if enc := cmwire.AppendMAD(nil, tid, wantRep); !bytes.Equal(enc, pkts[1].Payload) {
		t.Errorf("SIDR_REP re-encoded differs:\n got %x\nwant %x", enc, pkts[1].Payload)
	}

	// udaddy's exchange: the client's datagrams go to the SIDR_REP's QPN
	// and Q_Key with its own QPN as immediate data; the server answers to
	// that QPN with its own QP's Q_Key and QPN.
	for i, p := range pkts[2:] {
		from, to, imm := udaddyGuest, serverQPN, clientQPN
		if i >= 10 {
			from, to, imm = udaddyHost, clientQPN, serverQPN
		}
		if src[i+2] != from || p.Opcode() != wire.UDSendOnlyImm || p.BTH.DestQP() != to || p.DETH.QKey() != cmwire.RDMAUDPQKey ||
			p.DETH.SrcQP() != imm || wire.QPN(p.ImmDt.Imm()) != imm || len(p.Payload) != 100 {
			t.Errorf("frame %d: from %v %v to QP %v, DETH %+v, immediate %#x, %d bytes: want from %v to QP %v, Q_Key %#x, immediate %#x, 100 bytes",
				i+3, src[i+2], p.Opcode(), p.BTH.DestQP(), p.DETH.Fields(), p.ImmDt.Imm(), len(p.Payload), from, to, uint32(cmwire.RDMAUDPQKey), uint32(imm))
		}
	}
}
