package cmwire_test

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
)

// tsharkField is one Wireshark InfiniBand CM field and how to read the
// same value from our parse.
type tsharkField struct {
	name string
	get  func(m cmwire.Message) any // uint64 or netip.Addr
}

func u[T ~uint8 | ~uint16 | ~uint32 | ~uint64](v T) any { return uint64(v) }

func b2u(v bool) any {
	if v {
		return uint64(1)
	}
	return uint64(0)
}

func cma(m cmwire.Message) cmwire.CMAHeader {
	h, _, _ := cmwire.ParseCMAHeader(m.REQ().PrivateData())
	return h
}

// tsharkFields lists, per message, the fields compared with tshark 4.0
// (names from `tshark -G fields`). Wireshark 4.0.17 misplaces two REQ path
// fields: it reads the flow label from 3 bytes at body offset 88 with a
// 32-bit mask, showing our flow label >> 8, and the reserved bits and the
// packet rate from the single byte at 88. Those two are compared through
// the same mistakes, so that the raw bytes are still checked.
var tsharkFields = map[cmwire.AttrID][]tsharkField{
	cmwire.AttrREQ: {
		{"infiniband.cm.req", func(m cmwire.Message) any { return u(m.REQ().LocalCommID()) }},
		{"infiniband.cm.req.serviceid", func(m cmwire.Message) any { return u(m.REQ().ServiceID()) }},
		{"infiniband.cm.req.serviceid.dport", func(m cmwire.Message) any { _, p, _ := cmwire.SplitServiceID(m.REQ().ServiceID()); return u(p) }},
		{"infiniband.cm.req.localcaguid", func(m cmwire.Message) any { return u(m.REQ().LocalCAGUID()) }},
		{"infiniband.cm.req.localqkey", func(m cmwire.Message) any { return u(m.REQ().LocalQKey()) }},
		{"infiniband.cm.req.localqpn", func(m cmwire.Message) any { return u(m.REQ().LocalQPN()) }},
		{"infiniband.cm.req.responderres", func(m cmwire.Message) any { return u(m.REQ().ResponderResources()) }},
		{"infiniband.cm.req.localeecn", func(m cmwire.Message) any { return u(m.REQ().LocalEECN()) }},
		{"infiniband.cm.req.initdepth", func(m cmwire.Message) any { return u(m.REQ().InitiatorDepth()) }},
		{"infiniband.cm.req.remoteeecn", func(m cmwire.Message) any { return u(m.REQ().RemoteEECN()) }},
		{"infiniband.cm.req.remoteresptout", func(m cmwire.Message) any { return u(m.REQ().RemoteCMResponseTimeout()) }},
		{"infiniband.cm.req.transpsvctype", func(m cmwire.Message) any { return u(m.REQ().TransportType()) }},
		{"infiniband.cm.req.e2eflowctrl", func(m cmwire.Message) any { return b2u(m.REQ().EndToEndFlowControl()) }},
		{"infiniband.cm.req.startpsn", func(m cmwire.Message) any { return u(m.REQ().StartingPSN()) }},
		{"infiniband.cm.req.localresptout", func(m cmwire.Message) any { return u(m.REQ().LocalCMResponseTimeout()) }},
		{"infiniband.cm.req.retrcount", func(m cmwire.Message) any { return u(m.REQ().RetryCount()) }},
		{"infiniband.cm.req.pkey", func(m cmwire.Message) any { return u(m.REQ().PKey()) }},
		{"infiniband.cm.req.pppmtu", func(m cmwire.Message) any { return u(m.REQ().PathMTU()) }},
		{"infiniband.cm.req.rdcexist", func(m cmwire.Message) any { return b2u(m.REQ().RDCExists()) }},
		{"infiniband.cm.req.rnrretrcount", func(m cmwire.Message) any { return u(m.REQ().RNRRetryCount()) }},
		{"infiniband.cm.req.maxcmretr", func(m cmwire.Message) any { return u(m.REQ().MaxCMRetries()) }},
		{"infiniband.cm.req.srq", func(m cmwire.Message) any { return b2u(m.REQ().SRQ()) }},
		{"infiniband.cm.req.ext_transport", func(m cmwire.Message) any { return u(m.REQ().ExtendedTransportType()) }},
		{"infiniband.cm.req.prim_locallid", func(m cmwire.Message) any { return u(m.REQ().Primary().LocalLID()) }},
		{"infiniband.cm.req.prim_remotelid", func(m cmwire.Message) any { return u(m.REQ().Primary().RemoteLID()) }},
		{"infiniband.cm.req.prim_localgid_ipv4", func(m cmwire.Message) any { return m.REQ().Primary().LocalGID().Addr() }},
		{"infiniband.cm.req.prim_remotegid_ipv4", func(m cmwire.Message) any { return m.REQ().Primary().RemoteGID().Addr() }},
		{"infiniband.cm.req.prim_flowlabel", func(m cmwire.Message) any { return u(m.REQ().Primary().FlowLabel() >> 8) }},
		{"infiniband.cm.req.prim_pktrate", func(m cmwire.Message) any { return u(m.REQ().Primary().FlowLabel() >> 12 & 0x3F) }},
		{"infiniband.cm.req.prim_tfcclass", func(m cmwire.Message) any { return u(m.REQ().Primary().TrafficClass()) }},
		{"infiniband.cm.req.prim_hoplim", func(m cmwire.Message) any { return u(m.REQ().Primary().HopLimit()) }},
		{"infiniband.cm.req.prim_sl", func(m cmwire.Message) any { return u(m.REQ().Primary().SL()) }},
		{"infiniband.cm.req.prim_subnetlocal", func(m cmwire.Message) any { return b2u(m.REQ().Primary().SubnetLocal()) }},
		{"infiniband.cm.req.prim_localacktout", func(m cmwire.Message) any { return u(m.REQ().Primary().LocalACKTimeout()) }},
		{"infiniband.cm.req.alt_locallid", func(m cmwire.Message) any { return u(m.REQ().Alternate().LocalLID()) }},
		{"infiniband.cm.req.alt_remotelid", func(m cmwire.Message) any { return u(m.REQ().Alternate().RemoteLID()) }},
		{"infiniband.cm.req.alt_hoplim", func(m cmwire.Message) any { return u(m.REQ().Alternate().HopLimit()) }},
		{"infiniband.cm.req.alt_localacktout", func(m cmwire.Message) any { return u(m.REQ().Alternate().LocalACKTimeout()) }},
		{"infiniband.cm.req.ip_cm.majv", func(m cmwire.Message) any { return u(cma(m).Version() >> 4) }},
		{"infiniband.cm.req.ip_cm.minv", func(m cmwire.Message) any { return u(cma(m).Version() & 0xF) }},
		{"infiniband.cm.req.ip_cm.ipv", func(m cmwire.Message) any { return u(cma(m).IPVersion()) }},
		{"infiniband.cm.req.ip_cm.sport", func(m cmwire.Message) any { return u(cma(m).Port()) }},
		{"infiniband.cm.req.ip_cm.sip4", func(m cmwire.Message) any { return cma(m).Src() }},
		{"infiniband.cm.req.ip_cm.dip4", func(m cmwire.Message) any { return cma(m).Dst() }},
	},
	cmwire.AttrREP: {
		{"infiniband.cm.rep", func(m cmwire.Message) any { return u(m.REP().LocalCommID()) }},
		{"infiniband.cm.rep.remotecommid", func(m cmwire.Message) any { return u(m.REP().RemoteCommID()) }},
		{"infiniband.cm.rep.localqkey", func(m cmwire.Message) any { return u(m.REP().LocalQKey()) }},
		{"infiniband.cm.rep.localqpn", func(m cmwire.Message) any { return u(m.REP().LocalQPN()) }},
		{"infiniband.cm.rep.localeecn", func(m cmwire.Message) any { return u(m.REP().LocalEECN()) }},
		{"infiniband.cm.rep.startpsn", func(m cmwire.Message) any { return u(m.REP().StartingPSN()) }},
		{"infiniband.cm.rep.respres", func(m cmwire.Message) any { return u(m.REP().ResponderResources()) }},
		{"infiniband.cm.rep.initdepth", func(m cmwire.Message) any { return u(m.REP().InitiatorDepth()) }},
		{"infiniband.cm.rep.tgtackdelay", func(m cmwire.Message) any { return u(m.REP().TargetACKDelay()) }},
		{"infiniband.cm.rep.failoveracc", func(m cmwire.Message) any { return u(m.REP().FailoverAccepted()) }},
		{"infiniband.cm.rep.e2eflowctrl", func(m cmwire.Message) any { return b2u(m.REP().EndToEndFlowControl()) }},
		{"infiniband.cm.rep.rnrretrcount", func(m cmwire.Message) any { return u(m.REP().RNRRetryCount()) }},
		{"infiniband.cm.rep.srq", func(m cmwire.Message) any { return b2u(m.REP().SRQ()) }},
		{"infiniband.cm.rep.localcaguid", func(m cmwire.Message) any { return u(m.REP().LocalCAGUID()) }},
	},
	cmwire.AttrRTU: {
		{"infiniband.cm.rtu.localcommid", func(m cmwire.Message) any { return u(m.RTU().LocalCommID()) }},
		{"infiniband.cm.rtu.remotecommid", func(m cmwire.Message) any { return u(m.RTU().RemoteCommID()) }},
	},
	cmwire.AttrDREQ: {
		{"infiniband.cm.dreq.localcommid", func(m cmwire.Message) any { return u(m.DREQ().LocalCommID()) }},
		{"infiniband.cm.dreq.remotecommid", func(m cmwire.Message) any { return u(m.DREQ().RemoteCommID()) }},
		{"infiniband.cm.req.remoteqpneecn", func(m cmwire.Message) any { return u(m.DREQ().RemoteQPN()) }},
	},
	cmwire.AttrDREP: {
		{"infiniband.cm.drsp.localcommid", func(m cmwire.Message) any { return u(m.DREP().LocalCommID()) }},
		{"infiniband.cm.drsp.remotecommid", func(m cmwire.Message) any { return u(m.DREP().RemoteCommID()) }},
	},
}

// commonFields are compared for every CM MAD.
var commonFields = []tsharkField{
	{"infiniband.mad.transactionid", func(m cmwire.Message) any { return u(m.TransactionID()) }},
	{"infiniband.mad.attributeid", func(m cmwire.Message) any { return u(m.Attr()) }},
}

// TestTsharkCM decodes the captures with tshark (when it is on PATH) and
// compares each CM field Wireshark shows with our parse.
func TestTsharkCM(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH")
	}
	var names []string
	for _, f := range commonFields {
		names = append(names, f.name)
	}
	for _, attr := range []cmwire.AttrID{cmwire.AttrREQ, cmwire.AttrREP, cmwire.AttrRTU, cmwire.AttrDREQ, cmwire.AttrDREP} {
		for _, f := range tsharkFields[attr] {
			names = append(names, f.name)
		}
	}
	byFile := map[string][]capMAD{}
	for _, c := range capturedMADs(t) {
		byFile[c.file] = append(byFile[c.file], c)
	}
	compared := 0
	for _, file := range cmCaptureFiles {
		args := []string{"-r", filepath.Join(rxeDir, file), "-n",
			"-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma",
			"-Y", "infiniband.bth.destqp == 1",
			"-T", "fields", "-E", "separator=|", "-E", "occurrence=f", "-e", "frame.number"}
		for _, n := range names {
			args = append(args, "-e", n)
		}
		out, err := exec.Command(tshark, args...).Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", file, err)
		}
		rows := map[int]map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			cols := strings.Split(line, "|")
			if len(cols) != len(names)+1 {
				t.Fatalf("tshark row has %d columns, want %d", len(cols), len(names)+1)
			}
			frame, _ := strconv.Atoi(cols[0])
			row := map[string]string{}
			for i, n := range names {
				row[n] = cols[i+1]
			}
			rows[frame] = row
		}
		if len(rows) != len(byFile[file]) {
			t.Errorf("%s: tshark shows %d frames to QP1, we found %d", file, len(rows), len(byFile[file]))
		}
		for _, c := range byFile[file] {
			m, _, err := cmwire.ParseMessage(c.mad)
			if err != nil {
				t.Fatal(err)
			}
			row := rows[c.frame]
			if row == nil {
				t.Errorf("%s frame %d: not decoded by tshark", file, c.frame)
				continue
			}
			for _, f := range append(commonFields, tsharkFields[m.Attr()]...) {
				s := row[f.name]
				if s == "" {
					t.Errorf("%s frame %d: tshark has no %s", file, c.frame, f.name)
					continue
				}
				var got any
				if a, err := netip.ParseAddr(s); err == nil && strings.Contains(s, ".") {
					got = a
				} else if v, err := strconv.ParseUint(s, 0, 64); err == nil {
					got = v
				} else {
					t.Errorf("%s frame %d: %s = %q: cannot read", file, c.frame, f.name, s)
					continue
				}
				if want := f.get(m); got != want {
					t.Errorf("%s frame %d: %s: tshark %v, ours %v", file, c.frame, f.name, got, want)
				}
				compared++
			}
		}
	}
	t.Logf("%d field values agree with tshark", compared)
}
