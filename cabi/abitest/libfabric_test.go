//go:build tbrdma_abitest

package abitest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// libfabric 1.17 (Debian 12's libfabric1, libfabric-bin) over the library:
// its verbs provider, alone (FI_EP_MSG over rdma_cm RC, FI_EP_DGRAM over
// UD) and under the utility providers ofi_rxm (FI_EP_RDM over verbs MSG
// endpoints) and ofi_rxd (FI_EP_RDM over verbs DGRAM). The verbs provider
// is built into libfabric.so.1, which links libibverbs.so.1 and
// librdmacm.so.1, so LD_LIBRARY_PATH is all it takes (Lib ends).
//
// What the verbs provider needs of the library, beyond what the rdma-core
// tools use:
//
//   - rdma_bind_addr to 127.0.0.1 succeeds without a device, as the
//     kernel's rdma_cm takes a loopback address for the wildcard
//     (cma_any_addr). With no address to go on (fi_info, an fi_pingpong
//     server) the provider binds to "localhost" and, finding id->verbs
//     NULL, lists every device's address; a failed bind made it drop every
//     FI_EP_MSG fi_info, so ofi_rxm found no core provider.
//   - ibv_modify_qp with IBV_QP_MIN_RNR_TIMER alone on a connected (RTS)
//     QP succeeds (vrb_set_rnr_timer on every CONNECTED event), as over
//     rxe: a mask without IBV_QP_STATE keeps the state.
//
// ofi_rxd and FI_EP_DGRAM need FI_VERBS_GID_IDX=1: the provider makes its
// UD address handles from GID index 0 (FI_VERBS_GID_IDX's default), the
// RoCE v1 entry, which the library refuses with EINVAL as rdma_rxe does
// (docs/cabi.md, Devices and GIDs); index 1 is the RoCE v2 entry of the
// same address.
//
// fi_pingpong checks data with -c: the receiver compares every message
// with the pattern the sender wrote and exits 1 ("Error at iteration=")
// on a mismatch. Its out-of-band exchange (addresses, sync) is a TCP
// connection to the server's control port, 47592 by default (-B on the
// server, -P on the client); each case gets its own.

// fiInfoEntry is one entry of fi_info's short listing.
type fiInfoEntry struct{ provider, domain, typ string }

// fiInfoEntries parses "provider: P\n    fabric: F\n    domain: D\n ...
// type: T" blocks.
func fiInfoEntries(out string) []fiInfoEntry {
	var es []fiInfoEntry
	var cur *fiInfoEntry
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch k {
		case "provider":
			es = append(es, fiInfoEntry{provider: v})
			cur = &es[len(es)-1]
		case "domain":
			if cur != nil {
				cur.domain = v
			}
		case "type":
			if cur != nil {
				cur.typ = v
			}
		}
	}
	return es
}

// TestLibfabricInfo: fi_info -p verbs in a namespace lists the device for
// every endpoint type the verbs provider and its utility providers offer.
func TestLibfabricInfo(t *testing.T) {
	need(t, "fi_info")
	l := NewLink(t)
	r := RunIn(t, l.NsA, 60*time.Second, Lib("fi_info", "-p", "verbs"))
	if r.Err != nil {
		t.Fatalf("fi_info -p verbs: %v\n%s", r.Err, indent(r.Out))
	}
	got := map[fiInfoEntry]bool{}
	for _, e := range fiInfoEntries(r.Out) {
		got[e] = true
	}
	for _, w := range []fiInfoEntry{
		{"verbs", "tb_thunderbolt0", "FI_EP_MSG"},
		{"verbs", "tb_thunderbolt0-dgram", "FI_EP_DGRAM"},
		{"verbs;ofi_rxm", "tb_thunderbolt0", "FI_EP_RDM"},
		{"verbs;ofi_rxd", "tb_thunderbolt0-dgram", "FI_EP_RDM"},
	} {
		if !got[w] {
			t.Errorf("fi_info -p verbs: no entry provider %q, domain %q, type %s", w.provider, w.domain, w.typ)
		}
	}
	// The FI_EP_MSG entries carry the interface's address: what rxm and
	// an fi_pingpong server bind to.
	r2 := RunIn(t, l.NsA, 60*time.Second, Lib("fi_info", "-p", "verbs", "-t", "FI_EP_MSG", "-v"))
	if want := "src_addr: fi_sockaddr_in://" + l.AddrA + ":0"; r2.Err != nil || !strings.Contains(r2.Out, want) {
		t.Errorf("fi_info -p verbs -t FI_EP_MSG -v: %v; no %q", r2.Err, want)
	}
	if t.Failed() {
		t.Logf("fi_info -p verbs:\n%s", indent(r.Out))
	}
}

// fiSizeStr is a size as fi_pingpong prints it (size_str in
// util/pingpong.c): 64, 1.5k, 1m.
func fiSizeStr(n int) string {
	base, mag := 1, ""
	switch {
	case n >= 1<<30:
		base, mag = 1<<30, "g"
	case n >= 1<<20:
		base, mag = 1<<20, "m"
	case n >= 1<<10:
		base, mag = 1<<10, "k"
	}
	s := strconv.Itoa(n / base)
	if n/base < 10 {
		if f := (n % base) * 10 / base; f != 0 {
			s += "." + strconv.Itoa(f)
		}
	}
	return s + mag
}

// fiCountStr is a count as fi_pingpong prints it (cnt_str): 100, 10k.
func fiCountStr(n int) string {
	switch {
	case n >= 1000000000:
		return strconv.Itoa(n/1000000000) + "b"
	case n >= 1000000:
		return strconv.Itoa(n/1000000) + "m"
	case n >= 1000:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// fiDefaultSizes are fi_pingpong's sizes without -S; fiAllSizes those of
// -S all: 0, 1, then 2^i and 1.5 * 2^i up to the largest transfer, 6 MiB
// (PP_MAX_DATA_MSG) for every provider here.
var fiDefaultSizes = []int{64, 256, 1024, 4096, 65536, 1 << 20}

func fiAllSizes() []int {
	s := []int{0, 1}
	for i := 1; i <= 22; i++ {
		s = append(s, 1<<i, 1<<i+1<<(i-1))
	}
	return s
}

// "64      1k      =1k      125k        0.04s      3.18      20.12       0.05"
var fiRowRe = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+=(\S+)\s+(\S+)\s+(\d+\.\d+)s\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s*$`)

// fiRows checks that out has the header and one row per size, in order,
// each with iters sent and acknowledged and a positive time per transfer.
func fiRows(out string, sizes []int, iters int) error {
	if !regexp.MustCompile(`(?m)^bytes\s+#sent\s+#ack\s+total\s+time\s+MB/sec\s+usec/xfer\s+Mxfers/sec\s*$`).MatchString(out) {
		return fmt.Errorf("no header row (bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec)")
	}
	rows := fiRowRe.FindAllStringSubmatch(out, -1)
	if len(rows) != len(sizes) {
		return fmt.Errorf("%d result rows, want %d (one per size)", len(rows), len(sizes))
	}
	for i, m := range rows {
		if m[1] != fiSizeStr(sizes[i]) {
			return fmt.Errorf("row %d is for %s bytes, want %s: %q", i, m[1], fiSizeStr(sizes[i]), m[0])
		}
		if c := fiCountStr(iters); m[2] != c || m[3] != c {
			return fmt.Errorf("%s bytes: %s sent, %s acknowledged, want %s: %q", m[1], m[2], m[3], c, m[0])
		}
		if us, _ := strconv.ParseFloat(m[7], 64); us <= 0 {
			return fmt.Errorf("%s bytes: %s usec/xfer: %q", m[1], m[7], m[0])
		}
		if mb, _ := strconv.ParseFloat(m[6], 64); sizes[i] >= 4096 && mb <= 0 {
			return fmt.Errorf("%s bytes: %s MB/sec: %q", m[1], m[6], m[0])
		}
	}
	return nil
}

// fiCase is one fi_pingpong pairing.
type fiCase struct {
	name  string
	prov  string // -p
	ep    string // -e
	size  string // -S: a number, "all", or "" for the default sizes
	iters int
	env   []string // the provider's variables, both sides
	max   int      // the largest transfer, when below 6 MiB (a datagram: the path MTU)
}

func (c fiCase) sizes() []int {
	switch c.size {
	case "":
		var s []int
		for _, n := range fiDefaultSizes {
			if c.max == 0 || n <= c.max {
				s = append(s, n)
			}
		}
		return s
	case "all":
		return fiAllSizes()
	}
	n, _ := strconv.Atoi(c.size)
	return []int{n}
}

var fiCases = []fiCase{
	{name: "rxm/64", prov: "verbs;ofi_rxm", ep: "rdm", size: "64", iters: 1000},
	{name: "rxm/1MiB", prov: "verbs;ofi_rxm", ep: "rdm", size: "1048576", iters: 100},
	{name: "rxm/default", prov: "verbs;ofi_rxm", ep: "rdm", iters: 100},
	{name: "rxm/all", prov: "verbs;ofi_rxm", ep: "rdm", size: "all", iters: 20},
	{name: "msg/64", prov: "verbs", ep: "msg", size: "64", iters: 1000},
	{name: "msg/1MiB", prov: "verbs", ep: "msg", size: "1048576", iters: 100},
	{name: "msg/default", prov: "verbs", ep: "msg", iters: 100},
	{name: "msg/all", prov: "verbs", ep: "msg", size: "all", iters: 20},
	{name: "rxd/64", prov: "verbs;ofi_rxd", ep: "rdm", size: "64", iters: 1000, env: []string{"FI_VERBS_GID_IDX=1"}},
	{name: "rxd/1MiB", prov: "verbs;ofi_rxd", ep: "rdm", size: "1048576", iters: 20, env: []string{"FI_VERBS_GID_IDX=1"}},
	{name: "rxd/default", prov: "verbs;ofi_rxd", ep: "rdm", iters: 20, env: []string{"FI_VERBS_GID_IDX=1"}},
	// The verbs provider's own datagrams (UD, no retransmission: one
	// message in flight on a veth link is not lost); 4096 is the path MTU.
	{name: "dgram/64", prov: "verbs", ep: "dgram", size: "64", iters: 1000, env: []string{"FI_VERBS_GID_IDX=1"}},
	{name: "dgram/default", prov: "verbs", ep: "dgram", iters: 100, env: []string{"FI_VERBS_GID_IDX=1"}, max: 4096},
}

// TestLibfabricPingpong runs fi_pingpong between the namespaces over
// verbs;ofi_rxm (RDM), verbs (MSG and DGRAM) and verbs;ofi_rxd (RDM over
// UD), at 64 B, 1 MiB, the default sizes and (rxm, msg) the full sweep,
// data checked; both sides must exit 0 and print a result row per size.
func TestLibfabricPingpong(t *testing.T) {
	need(t, "fi_pingpong")
	l := NewLink(t)
	for i, c := range fiCases {
		port := 47600 + i
		t.Run(c.name, func(t *testing.T) {
			args := []string{"fi_pingpong", "-p", c.prov, "-e", c.ep, "-c", "-I", strconv.Itoa(c.iters)}
			if c.size != "" {
				args = append(args, "-S", c.size)
			}
			argv := func(extra ...string) []string {
				a := append([]string{}, args...)
				a = append(a, extra...)
				if len(c.env) > 0 {
					a = append(append([]string{"env"}, c.env...), a...)
				}
				return a
			}
			srv := Lib(argv("-B", strconv.Itoa(port))...)
			cli := Lib(argv("-P", strconv.Itoa(port), l.AddrA)...)
			r := RunPair(t, l, "fi_pingpong "+c.name, 120*time.Second, srv, TCPListen(port), cli)
			if !r.OK() {
				t.Fatalf("%s: not both exit 0\n%s", c.name, r.Dump())
			}
			for _, s := range []struct {
				side string
				out  string
			}{{"server", r.Srv.Out}, {"client", r.Cli.Out}} {
				if strings.Contains(s.out, "Error at iteration") {
					t.Errorf("%s: the %s found corrupted data", c.name, s.side)
				}
				if err := fiRows(s.out, c.sizes(), c.iters); err != nil {
					t.Errorf("%s: the %s's output: %v", c.name, s.side, err)
				}
			}
			if t.Failed() {
				t.Logf("%s", r.Dump())
			}
		})
	}
}
