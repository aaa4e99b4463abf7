package cmwire_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
)

// reqParams is what an active rdma_cm side knows when it sends a REQ.
type reqParams struct {
	// Per connection, random or allocated:
	hiTID   uint32        // MAD agent counter (kernel: per registration)
	commID  cmwire.CommID // ib_cm local ID (xarray index ^ random operand)
	psn     wire.PSN      // rdma_cm_id seq_num (random 24 bits)
	srcPort uint16        // rdma_cm source port (random ephemeral)
	qpn     wire.QPN      // allocated by the device (rxe: 0x11 is the first)

	// Per situation:
	src, dst        netip.Addr
	ps              cmwire.PortSpace
	dstPort         uint16
	guid            uint64
	respRes, depth  uint8 // rdma_conn_param
	retry, rnrRetry uint8
	netdevMTU       int
	caAckDelay      cmwire.Timeout // device local_ca_ack_delay (rxe: 15)
	packetLifetime  cmwire.Timeout // CMA_IBOE_PACKET_LIFETIME (18 in 6.1)
	hopLimit        uint8          // route hop limit
	userData        []byte         // ≤ 56 bytes
}

// buildREQ builds a REQ MAD the way librdmacm and the Linux 6.1 kernel CM
// fill it on RoCEv2 (roce-wire.md §7.4).
func buildREQ(p reqParams) []byte {
	f := cmwire.REQFields{
		LocalCommID:             p.commID,
		ServiceID:               cmwire.ServiceID(p.ps, p.dstPort),
		LocalCAGUID:             p.guid,
		LocalQPN:                p.qpn,
		ResponderResources:      p.respRes,
		InitiatorDepth:          p.depth,
		RemoteCMResponseTimeout: 20, // CMA_CM_RESPONSE_TIMEOUT
		TransportType:           cmwire.TransportRC,
		StartingPSN:             p.psn,
		LocalCMResponseTimeout:  20,
		RetryCount:              min(p.retry, 7),
		PKey:                    wire.PKeyDefault,
		// iboe_get_mtu: the largest IB MTU below the netdev MTU minus
		// the RoCEv2 headers (IP 20 + UDP 8 + BTH 12 + DETH 8 + ICRC 4 and
		// rounding: 4500 → 4096).
		PathMTU:       cmwire.MTUFromBytes(p.netdevMTU - 48),
		RNRRetryCount: min(p.rnrRetry, 7),
		MaxCMRetries:  15, // CMA_MAX_CM_RETRIES
		Primary: cmwire.PathFields{
			LocalLID: 0xFFFF, RemoteLID: 0xFFFF, // permissive: hop limit > 1
			LocalGID: wire.GIDFromAddr(p.src), RemoteGID: wire.GIDFromAddr(p.dst),
			// cma_get_roce_udp_flow_label (newer kernels, 6.1 included).
			FlowLabel:       (uint32(p.srcPort)*31 + uint32(p.dstPort)) & 0xFFFFF,
			HopLimit:        p.hopLimit,
			LocalACKTimeout: cmwire.AckTimeout(p.caAckDelay, p.packetLifetime),
		},
	}
	hdr := cmwire.NewCMAHeader(p.srcPort, p.src, p.dst).Append(f.PrivateData[:0])
	copy(f.PrivateData[len(hdr):], p.userData)
	return cmwire.AppendMAD(nil, cmwire.KernelTID(p.hiTID, p.commID), f)
}

// rpingParams is the situation of the captured rping REQ: rping -c -a
// 198.18.0.3 (port 7174, conn_param responder_resources 1,
// initiator_depth 1, retry_count 7, rnr_retry_count 7, no private data)
// over rxe on a 4500-byte-MTU netdev.
var rpingParams = reqParams{
	hiTID: 2, commID: 0x6071f97b, psn: 0x1a4a45, srcPort: 0xd1ea, qpn: 0x11,
	src: clientIP, dst: serverIP, ps: cmwire.PSTCP, dstPort: 7174, guid: clientGUID,
	respRes: 1, depth: 1, retry: 7, rnrRetry: 7, netdevMTU: 4500,
	caAckDelay: 15, packetLifetime: 18, hopLimit: 64,
}

// TestBuildREQLikeKernel builds the rping REQ from its situation and
// compares it with the capture.
//
// With the capture's per-connection values as inputs the whole 256-byte
// MAD is identical. Between two connections in the same situation these
// fields differ, and only these (checked below with other random values):
//
//   - Local Communication ID: ib_cm's xarray index XOR a boot-time random
//     operand;
//   - Transaction ID: the MAD agent's hi_tid and the comm ID (byte-swapped
//     on little-endian hosts, see KernelTID);
//   - Starting PSN: the rdma_cm_id's random seq_num;
//   - CMA header source port: rdma_cm binds the active ID to a random
//     ephemeral port;
//   - Primary flow label: newer kernels derive it from the two ports;
//   - Local QPN, when other QPs exist (rxe hands out 0x11, 0x12, ...).
func TestBuildREQLikeKernel(t *testing.T) {
	var captured []byte
	for _, c := range capturedMADs(t) {
		if c.file == "rping.pcap" && c.frame == 1 {
			captured = c.mad
		}
	}
	if captured == nil {
		t.Fatal("rping REQ not found")
	}
	got := buildREQ(rpingParams)
	if !bytes.Equal(got, captured) {
		gm, _, _ := cmwire.ParseMessage(got)
		cm, _, _ := cmwire.ParseMessage(captured)
		t.Fatalf("built REQ differs from the capture:\n got %+v\nwant %+v", gm.REQ().Fields(), cm.REQ().Fields())
	}

	// Another connection: only the listed fields change.
	other := rpingParams
	other.hiTID, other.commID, other.psn, other.srcPort, other.qpn = 3, 0x01020304, 0x123456, 40000, 0x12
	o, _, err := cmwire.ParseMessage(buildREQ(other))
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := cmwire.ParseMessage(captured)
	of, cf := o.REQ().Fields(), c.REQ().Fields()
	if of.LocalCommID == cf.LocalCommID || of.StartingPSN == cf.StartingPSN || of.LocalQPN == cf.LocalQPN ||
		of.Primary.FlowLabel == cf.Primary.FlowLabel || o.TransactionID() == c.TransactionID() {
		t.Errorf("per-connection fields did not change: %+v", of)
	}
	of.LocalCommID, of.StartingPSN, of.LocalQPN, of.Primary.FlowLabel = cf.LocalCommID, cf.StartingPSN, cf.LocalQPN, cf.Primary.FlowLabel
	copy(of.PrivateData[2:4], cf.PrivateData[2:4]) // CMA source port
	if of != cf {
		t.Errorf("fields other than the per-connection ones differ:\n got %+v\nwant %+v", of, cf)
	}

	// User data lands after the CMA header.
	other.userData = []byte("hello")
	o, _, _ = cmwire.ParseMessage(buildREQ(other))
	if ud := o.REQ().UserData(); len(ud) != cmwire.REQUserDataSize || string(ud[:6]) != "hello\x00" {
		t.Errorf("user data %q", ud)
	}
}
