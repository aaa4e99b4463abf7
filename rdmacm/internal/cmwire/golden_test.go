package cmwire_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// Addresses and GUIDs of the capture guests (testdata/rxe/MANIFEST.md and
// the ibv_devinfo output in *.client.txt / *.server.txt).
var (
	clientIP   = netip.MustParseAddr("198.18.0.2")
	serverIP   = netip.MustParseAddr("198.18.0.3")
	clientGUID = uint64(0x505400fffe120002)
	serverGUID = uint64(0x505400fffe120003)
)

// goldenMsg is what one captured MAD must decode to. Values are read from
// the capture (tshark -V) and cross-checked with the tools' output: rping
// listens on its default port 7174, ib_write_bw -R on 18515, and perftest
// prints QPN 0x12 for its data connection.
type goldenMsg struct {
	file      string
	frame     int
	attr      cmwire.AttrID
	tid       uint64
	local     cmwire.CommID
	remote    cmwire.CommID
	qpn       wire.QPN // REQ/REP Local QPN, DREQ Remote QPN
	psn       wire.PSN // REQ/REP Starting PSN
	respRes   uint8
	initDepth uint8
	cmaPort   uint16 // REQ: CMA header source port
	sidPort   uint16 // REQ: destination port from the service ID
}

var goldenMsgs = []goldenMsg{
	{file: "rping.pcap", frame: 1, attr: cmwire.AttrREQ, tid: 0x27bf97160, local: 0x6071f97b,
		qpn: 0x11, psn: 0x1a4a45, respRes: 1, initDepth: 1, cmaPort: 0xd1ea, sidPort: 7174},
	{file: "rping.pcap", frame: 2, attr: cmwire.AttrREP, tid: 0x27bf97160, local: 0xa9b5c8e4, remote: 0x6071f97b,
		qpn: 0x11, psn: 0x188d2e, respRes: 1, initDepth: 1},
	{file: "rping.pcap", frame: 3, attr: cmwire.AttrRTU, tid: 0x27bf97160, local: 0x6071f97b, remote: 0xa9b5c8e4},
	{file: "rping.pcap", frame: 40, attr: cmwire.AttrDREQ, tid: 0x27bf97160, local: 0x6071f97b, remote: 0xa9b5c8e4, qpn: 0x11},
	{file: "rping.pcap", frame: 41, attr: cmwire.AttrDREP, tid: 0x27bf97160, local: 0xa9b5c8e4, remote: 0x6071f97b},

	{file: "write_bw_rdma_cm.pcap", frame: 1, attr: cmwire.AttrREQ, tid: 0x2f79c7316, local: 0x16739cf7,
		qpn: 0x11, psn: 0xeb8831, cmaPort: 0xa8ac, sidPort: 18515},
	{file: "write_bw_rdma_cm.pcap", frame: 2, attr: cmwire.AttrREP, tid: 0x2f79c7316, local: 0xc391b061, remote: 0x16739cf7,
		qpn: 0x11, psn: 0x687a34},
	{file: "write_bw_rdma_cm.pcap", frame: 3, attr: cmwire.AttrRTU, tid: 0x2f79c7316, local: 0x16739cf7, remote: 0xc391b061},
	{file: "write_bw_rdma_cm.pcap", frame: 24, attr: cmwire.AttrREQ, tid: 0x2f79c7317, local: 0x17739cf7,
		qpn: 0x12, psn: 0x064b3d, cmaPort: 0xe1e1, sidPort: 18515},
	{file: "write_bw_rdma_cm.pcap", frame: 25, attr: cmwire.AttrREP, tid: 0x2f79c7317, local: 0xc191b061, remote: 0x17739cf7,
		qpn: 0x12, psn: 0xc394ed},
	{file: "write_bw_rdma_cm.pcap", frame: 26, attr: cmwire.AttrRTU, tid: 0x2f79c7317, local: 0x17739cf7, remote: 0xc191b061},
	{file: "write_bw_rdma_cm.pcap", frame: 156, attr: cmwire.AttrDREQ, tid: 0x2f79c7317, local: 0x17739cf7, remote: 0xc191b061, qpn: 0x12},
	{file: "write_bw_rdma_cm.pcap", frame: 157, attr: cmwire.AttrDREP, tid: 0x2f79c7317, local: 0xc191b061, remote: 0x17739cf7},
	// The first (QPN 0x11) connection is torn down by the passive side.
	{file: "write_bw_rdma_cm.pcap", frame: 158, attr: cmwire.AttrDREQ, tid: 0x261b091c3, local: 0xc391b061, remote: 0x16739cf7, qpn: 0x11},
	{file: "write_bw_rdma_cm.pcap", frame: 159, attr: cmwire.AttrDREP, tid: 0x261b091c3, local: 0x16739cf7, remote: 0xc391b061},
}

// TestRxeGolden parses every MAD to QP1 in the captures, checks the fields
// against goldenMsgs and the constants the kernel CM and rdma_cm use on
// rxe, and re-encodes each message to the captured bytes.
func TestRxeGolden(t *testing.T) {
	mads := capturedMADs(t)
	if len(mads) != len(goldenMsgs) {
		t.Fatalf("%d MADs to QP1 in the captures, want %d (MANIFEST.md: rping 5, write_bw_rdma_cm 10)", len(mads), len(goldenMsgs))
	}
	for i, c := range mads {
		g := goldenMsgs[i]
		if c.file != g.file || c.frame != g.frame {
			t.Fatalf("MAD %d is %s frame %d, want %s frame %d", i, c.file, c.frame, g.file, g.frame)
		}
		m, n, err := cmwire.ParseMessage(c.mad)
		if err != nil || n != wire.MADSize {
			t.Fatalf("%s frame %d: ParseMessage: n %d, %v", c.file, c.frame, n, err)
		}
		if m.Attr() != g.attr || m.TransactionID() != g.tid {
			t.Errorf("%s frame %d: %v tid %#x, want %v tid %#x", c.file, c.frame, m.Attr(), m.TransactionID(), g.attr, g.tid)
		}
		if h := m.MAD(); h.Status() != 0 || h.ClassSpecific() != 0 || h.Reserved() != 0 || h.AttributeModifier() != 0 {
			t.Errorf("%s frame %d: MAD header %+v, want status, class-specific, reserved and modifier 0", c.file, c.frame, h.Fields())
		}
		// Active side = client: it sends REQ and RTU; the sender of each
		// message is the IP source.
		fromClient := c.src.Addr() == clientIP
		ownGUID, peerIP := serverGUID, clientIP
		if fromClient {
			ownGUID, peerIP = clientGUID, serverIP
		}
		if c.dst.Addr() != peerIP {
			t.Errorf("%s frame %d: %v -> %v", c.file, c.frame, c.src, c.dst)
		}
		checkGolden(t, c, m, g, ownGUID)

		// Re-encoding the parsed message gives the captured bytes.
		if enc := m.Fields().Append(nil); !bytes.Equal(enc, c.mad) {
			t.Errorf("%s frame %d: re-encode differs:\n got %x\nwant %x", c.file, c.frame, enc, c.mad)
		}
		if enc := cmwire.AppendMAD(nil, m.TransactionID(), m.BodyFields()); !bytes.Equal(enc, c.mad) {
			t.Errorf("%s frame %d: AppendMAD differs", c.file, c.frame)
		}
	}
}

func checkGolden(t *testing.T, c capMAD, m cmwire.Message, g goldenMsg, ownGUID uint64) {
	t.Helper()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s frame %d %v: "+format, append([]any{c.file, c.frame, m.Attr()}, args...)...)
	}
	zero := func(name string, b []byte) {
		t.Helper()
		if !bytes.Equal(b, make([]byte, len(b))) {
			errorf("%s not zero: %x", name, b)
		}
	}
	switch g.attr {
	case cmwire.AttrREQ:
		r := m.REQ()
		if r.LocalCommID() != g.local || r.LocalQPN() != g.qpn || r.StartingPSN() != g.psn ||
			r.ResponderResources() != g.respRes || r.InitiatorDepth() != g.initDepth || r.LocalCAGUID() != ownGUID {
			errorf("got %+v", r.Fields())
		}
		// The kernel forms the REQ TID from the byte-swapped comm ID.
		if tid := cmwire.KernelTID(2, r.LocalCommID()); tid != g.tid {
			errorf("KernelTID = %#x, want %#x", tid, g.tid)
		}
		ps, port, ok := cmwire.SplitServiceID(r.ServiceID())
		if !ok || ps != cmwire.PSTCP || port != g.sidPort || !cmwire.IsCMAServiceID(r.ServiceID()) {
			errorf("service ID %#x = %v port %d ok %v", r.ServiceID(), ps, port, ok)
		}
		// rdma_cm and ib_cm constants on rxe (roce-wire.md §7.4).
		want := cmwire.REQFields{
			LocalCommID: g.local, ServiceID: cmwire.ServiceID(cmwire.PSTCP, g.sidPort), LocalCAGUID: clientGUID,
			LocalQPN: g.qpn, ResponderResources: g.respRes, InitiatorDepth: g.initDepth,
			RemoteCMResponseTimeout: 20, TransportType: cmwire.TransportRC, StartingPSN: g.psn,
			LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xFFFF, PathMTU: cmwire.MTU4096,
			RNRRetryCount: 7, MaxCMRetries: 15,
			Primary: cmwire.PathFields{
				LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
				LocalGID: wire.GIDFromAddr(clientIP), RemoteGID: wire.GIDFromAddr(serverIP),
				// Newer kernels: (src port × 31 + dst port) & 0xFFFFF.
				FlowLabel: (uint32(g.cmaPort)*31 + uint32(g.sidPort)) & 0xFFFFF,
				HopLimit:  64, LocalACKTimeout: cmwire.AckTimeout(15, 18),
			},
		}
		if got := r.Fields(); got != want {
			want.PrivateData = got.PrivateData
			if got != want {
				errorf("\n got %+v\nwant %+v", got, want)
			}
		}
		if r.HasAlternatePath() {
			errorf("has an alternate path")
		}
		h, n, err := cmwire.ParseCMAHeader(r.PrivateData())
		if err != nil || n != cmwire.CMAHeaderSize {
			errorf("CMA header: %v", err)
			return
		}
		wantHdr := cmwire.CMAHeaderFields{Version: 0, IPVersion: 4, Port: g.cmaPort, Src: clientIP, Dst: serverIP}
		if h.Fields() != wantHdr {
			errorf("CMA header %+v, want %+v", h.Fields(), wantHdr)
		}
		if !bytes.Equal(h.Fields().Append(nil), r.PrivateData()[:cmwire.CMAHeaderSize]) {
			errorf("CMA header re-encode differs")
		}
		zero("user data", r.UserData()) // neither rping nor perftest sends any
	case cmwire.AttrREP:
		r := m.REP()
		want := cmwire.REPFields{
			LocalCommID: g.local, RemoteCommID: g.remote, LocalQPN: g.qpn, StartingPSN: g.psn,
			ResponderResources: g.respRes, InitiatorDepth: g.initDepth,
			TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: serverGUID, // rxe ACK delay 15
		}
		if got := r.Fields(); got != want {
			errorf("\n got %+v\nwant %+v", got, want)
		}
	case cmwire.AttrRTU:
		r := m.RTU()
		if r.LocalCommID() != g.local || r.RemoteCommID() != g.remote {
			errorf("got %+v", r.Fields())
		}
		zero("private data", r.PrivateData())
	case cmwire.AttrDREQ:
		r := m.DREQ()
		if r.LocalCommID() != g.local || r.RemoteCommID() != g.remote || r.RemoteQPN() != g.qpn || r.Reserved11() != 0 {
			errorf("got %+v", r.Fields())
		}
		if tid := cmwire.KernelTID(2, r.LocalCommID()); tid != g.tid {
			errorf("KernelTID = %#x, want %#x", tid, g.tid)
		}
		zero("private data", r.PrivateData())
	case cmwire.AttrDREP:
		r := m.DREP()
		if r.LocalCommID() != g.local || r.RemoteCommID() != g.remote {
			errorf("got %+v", r.Fields())
		}
		zero("private data", r.PrivateData())
	default:
		errorf("unexpected message")
	}
}
