package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
	"github.com/tbrdma/tbrdma/verbs"
)

type devicesOptions struct {
	IO     *ui.IO
	List   func(*verbs.DeviceListOptions) ([]*verbs.Device, error)
	Kernel func() []string // kernel RDMA devices (/sys/class/infiniband)
	// Live reads the counter files of the tbrdma processes that have a
	// device open (livecounters.go), for -v and --json.
	Live    func() ([]liveFile, error)
	Verbose bool
	All     bool
	JSON    bool
}

func newCmdDevices(f *Factory, runF func(*devicesOptions) error) *cobra.Command {
	opts := &devicesOptions{IO: f.IO, List: verbs.Devices, Kernel: kernelRDMADevices,
		Live: func() ([]liveFile, error) { return readLive(liveDir(), time.Now()) }}
	cmd := &cobra.Command{
		Use:   "devices [-v] [--all] [--json]",
		Short: "List the soft RDMA devices, one per network interface (like ibv_devices / ibv_devinfo)",
		Long: `List tbrdma's soft RDMA devices: one per usable network interface (up, with an
address), Thunderbolt links first. Each shows its netdev, port state, active
and maximum IB MTU (the largest IB MTU that fits the link MTU less 80 header
bytes, as rdma_rxe computes it) and node GUID; -v prints an ibv_devinfo -v
style block per device with the attributes, limits and the GID table.
-v and --json also show each device's live counters (packets, drops by
reason, retransmits, timeouts, NAKs and RNR NAKs sent and received, MADs):
those of every running tbrdma process that has the device open (serve, a
test, cat …), summed, with how many processes and their PIDs. Each such
process publishes them about every second in $XDG_RUNTIME_DIR/tbrdma (else
$TMPDIR/tbrdma-UID), one file per process, removed when it exits; a device no
process has open shows none.
Kernel RDMA devices (/sys/class/infiniband, e.g. an rdma_rxe "rxe0") are listed
too, marked as such: tbrdma does not use them, but it cannot share UDP port
4791 on their addresses.`,
		Example: "  tbrdma devices\n  tbrdma devices -v\n  tbrdma devices --all --json",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runDevices(opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Verbose, "verbose", "v", false, "print all attributes, the GID table and the counters (ibv_devinfo -v)")
	cmd.Flags().BoolVar(&opts.All, "all", false, "also list loopback, down and address-less interfaces")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "one JSON object per device (schemaVersion 1)")
	return cmd
}

func runDevices(o *devicesOptions) error {
	devs, err := o.List(&verbs.DeviceListOptions{All: o.All})
	if err != nil {
		return fmt.Errorf("list devices: %w", err)
	}
	kernel := o.Kernel()
	var files []liveFile
	var liveErr error
	if (o.JSON || o.Verbose) && o.Live != nil {
		files, liveErr = o.Live()
	}
	if o.JSON {
		return devicesJSON(o.IO.Out, devs, kernel, files, liveErr)
	}
	if len(devs) == 0 && len(kernel) == 0 {
		return fmt.Errorf("no devices: no network interface is up with an address (try --all, or bring up the Thunderbolt link: see docs/tutorial.md)")
	}
	if o.Verbose {
		for _, d := range devs {
			writeDevinfo(o.IO.Out, d, files, liveErr)
		}
		for _, k := range kernel {
			fmt.Fprintf(o.IO.Out, "hca_id:\t%s\t(kernel RDMA device; see ibv_devinfo -d %s)\n\n", k, k)
		}
		return nil
	}
	w := o.IO.StyledOut()
	st := o.IO.Styles()
	h := func(s string, width int) string { return ui.Pad(st.Header, s, width) }
	fmt.Fprintf(w, "    %s\t%s\t%s\t%s\t%s\t%s\n", h("device", 16), h("   node GUID    ", 16), h("netdev", 12), h("state", 6), h("mtu", 9), st.Header.Render("GID[0]"))
	fmt.Fprintf(w, "    %-16s\t%s\t%-12s\t%-6s\t%-9s\t%s\n", "------", "----------------", "------", "-----", "---", "------")
	for _, d := range devs {
		gid := "-"
		if len(d.GIDs) > 0 {
			gid = d.GIDs[0].GID.String()
		}
		netdev := d.Netdev
		if d.Thunderbolt {
			netdev += "*"
		}
		state := shortState(d.PortState)
		fmt.Fprintf(w, "    %-16s\t%016x\t%-12s\t%s\t%-9s\t%s\n", d.Name, uint64(d.NodeGUID), netdev, ui.Pad(stateStyle(st, d.PortState), state, 6),
			fmt.Sprintf("%d/%d", d.ActiveMTU.Bytes(), d.MaxMTU.Bytes()), gid)
	}
	for _, k := range kernel {
		fmt.Fprintf(w, "    %-16s\t%s\t%-12s\t%-6s\t%-9s\t%s\n", k, ui.Pad(st.Muted, "(kernel device)", 16), "-", "-", "-", "-")
	}
	if hasThunderbolt(devs) {
		fmt.Fprintln(w, "\n    * Thunderbolt link")
	}
	return nil
}

func hasThunderbolt(devs []*verbs.Device) bool {
	for _, d := range devs {
		if d.Thunderbolt {
			return true
		}
	}
	return false
}

// stateStyle colors a port state: ACTIVE green, DOWN red, others amber.
func stateStyle(st *ui.Styles, s verbs.PortState) lipgloss.Style {
	switch s {
	case verbs.PortActive:
		return st.OK
	case verbs.PortDown:
		return st.Bad
	}
	return st.Warn
}

func shortState(s verbs.PortState) string {
	return strings.TrimPrefix(s.String(), "PORT_")
}

// writeDevinfo prints one device the way ibv_devinfo -v does (labels and
// tabs), so that the two can be compared line by line, followed by the
// live counters of the processes that have it open (files; liveErr says
// why they could not be read).
func writeDevinfo(w io.Writer, d *verbs.Device, files []liveFile, liveErr error) {
	a := d.QueryDevice()
	p, _ := d.QueryPort(1)
	fmt.Fprintf(w, "hca_id:\t%s\n", d.Name)
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%v\n", a.NodeGUID)
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%v\n", a.SysImageGUID)
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	fmt.Fprintf(w, "\tnetdev:\t\t\t\t%s (%s, link MTU %d%s)\n", d.Netdev, kindOf(d), d.LinkMTU, speedOf(p.LinkSpeed))
	fmt.Fprintf(w, "\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	fmt.Fprintf(w, "\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	fmt.Fprintf(w, "\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
	fmt.Fprintf(w, "\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
	fmt.Fprintf(w, "\tdevice_cap_flags:\t\t0x%08x\n", uint32(a.DeviceCapFlags))
	for _, f := range strings.Split(a.DeviceCapFlags.String(), "|") {
		if f != "" && f != "0" {
			fmt.Fprintf(w, "\t\t\t\t\t%s\n", f)
		}
	}
	fmt.Fprintf(w, "\tmax_sge:\t\t\t%d\n", a.MaxSGE)
	fmt.Fprintf(w, "\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
	fmt.Fprintf(w, "\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
	fmt.Fprintf(w, "\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
	fmt.Fprintf(w, "\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
	fmt.Fprintf(w, "\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
	fmt.Fprintf(w, "\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
	fmt.Fprintf(w, "\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
	fmt.Fprintf(w, "\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
	fmt.Fprintf(w, "\tatomic_cap:\t\t\t%v (%d)\n", a.AtomicCap, a.AtomicCap)
	fmt.Fprintf(w, "\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
	fmt.Fprintf(w, "\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
	fmt.Fprintf(w, "\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
	fmt.Fprintf(w, "\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	fmt.Fprintf(w, "\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
	fmt.Fprintf(w, "\tmax_inline_data:\t\t%d\n", a.MaxInlineData)
	fmt.Fprintf(w, "\t\tport:\t1\n")
	fmt.Fprintf(w, "\t\t\tstate:\t\t\tPORT_%s (%d)\n", shortState(p.State), p.State)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%d (%d)\n", p.MaxMTU.Bytes(), p.MaxMTU)
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%d (%d)\n", p.ActiveMTU.Bytes(), p.ActiveMTU)
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%v\n", p.LinkLayer)
	fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSz)
	fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", uint32(p.PortCapFlags))
	fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\t%d\n", p.MaxVLNum)
	fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
	fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
	fmt.Fprintf(w, "\t\t\tactive_width:\t\t%v (%d)\n", p.ActiveWidth, p.ActiveWidth)
	fmt.Fprintf(w, "\t\t\tactive_speed:\t\t%v (%d)\n", p.ActiveSpeed, p.ActiveSpeed)
	fmt.Fprintf(w, "\t\t\tphys_state:\t\t%v (%d)\n", p.PhysState, p.PhysState)
	for _, g := range d.GIDs {
		fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%v, %v\n", g.Index, g.GID, g.Type)
	}
	dl := liveFor(d, files)
	switch {
	case liveErr != nil:
		fmt.Fprintf(w, "\tcounters:\t\t\tunavailable: %v\n", liveErr)
	case len(dl.Procs) == 0:
		fmt.Fprintf(w, "\tcounters:\t\t\tnone (no tbrdma process has the device open)\n")
	default:
		procs := make([]string, len(dl.Procs))
		for i, p := range dl.Procs {
			procs[i] = strconv.Itoa(p.PID)
			if p.Command != "" {
				procs[i] += " (" + p.Command + ")"
			}
		}
		noun := "processes"
		if len(procs) == 1 {
			noun = "process"
		}
		fmt.Fprintf(w, "\tcounters (live, %d %s: PID %s):\n", len(procs), noun, strings.Join(procs, ", "))
		for _, f := range (&verbs.Counters{}).Fields() {
			fmt.Fprintf(w, "\t\t%-24s%d\n", f.Name+":", dl.Counters[f.Name])
		}
	}
	fmt.Fprintln(w)
}

func kindOf(d *verbs.Device) string {
	if d.Thunderbolt {
		return "Thunderbolt"
	}
	if d.Interface.Kind != "" {
		return d.Interface.Kind
	}
	return "network interface"
}

func speedOf(bps uint64) string {
	if bps == 0 {
		return ""
	}
	return fmt.Sprintf(", %g Gb/s", float64(bps)/1e9)
}

// deviceJSON is the --json row of one device (schemaVersion 1). Raw units.
type deviceJSON struct {
	SchemaVersion  int       `json:"schemaVersion"`
	Name           string    `json:"name"`
	Kind           string    `json:"kind"` // "tbrdma" or "kernel"
	Netdev         string    `json:"netdev,omitempty"`
	Thunderbolt    bool      `json:"thunderbolt"`
	NodeGUID       string    `json:"node_guid,omitempty"`
	State          string    `json:"state,omitempty"`
	LinkMTUBytes   int       `json:"link_mtu_bytes,omitempty"`
	ActiveMTUBytes int       `json:"active_mtu_bytes,omitempty"`
	MaxMTUBytes    int       `json:"max_mtu_bytes,omitempty"`
	LinkSpeedBps   uint64    `json:"link_speed_bps,omitempty"`
	GIDs           []gidJSON `json:"gids,omitempty"`
	// Counters are the live counters of the device (names as
	// verbs.Counters.Fields), summed over the Processes tbrdma processes
	// (PIDs) that have it open; absent when none has. CountersError says
	// why they could not be read.
	Counters      map[string]uint64 `json:"counters,omitempty"`
	CountersError string            `json:"counters_error,omitempty"`
	Processes     *int              `json:"processes,omitempty"`
	PIDs          []int             `json:"pids,omitempty"`
}

type gidJSON struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	Type  string `json:"type"`
	Addr  string `json:"addr"`
}

func devicesJSON(w io.Writer, devs []*verbs.Device, kernel []string, files []liveFile, liveErr error) error {
	enc := json.NewEncoder(w)
	for _, d := range devs {
		row := deviceJSON{SchemaVersion: 1, Name: d.Name, Kind: "tbrdma", Netdev: d.Netdev, Thunderbolt: d.Thunderbolt,
			NodeGUID: d.NodeGUID.String(), State: d.PortState.String(), LinkMTUBytes: d.LinkMTU,
			ActiveMTUBytes: d.ActiveMTU.Bytes(), MaxMTUBytes: d.MaxMTU.Bytes(), LinkSpeedBps: d.Interface.Speed}
		for _, g := range d.GIDs {
			row.GIDs = append(row.GIDs, gidJSON{Index: g.Index, GID: g.GID.String(), Type: g.Type.String(), Addr: g.Addr.String()})
		}
		if liveErr != nil {
			row.CountersError = liveErr.Error()
		} else {
			dl := liveFor(d, files)
			n := len(dl.Procs)
			row.Processes = &n
			for _, p := range dl.Procs {
				row.PIDs = append(row.PIDs, p.PID)
			}
			if n > 0 {
				row.Counters = make(map[string]uint64)
				for _, f := range (&verbs.Counters{}).Fields() {
					row.Counters[f.Name] = dl.Counters[f.Name]
				}
			}
		}
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	for _, k := range kernel {
		if err := enc.Encode(deviceJSON{SchemaVersion: 1, Name: k, Kind: "kernel"}); err != nil {
			return err
		}
	}
	return nil
}

// kernelRDMADevices lists /sys/class/infiniband (empty where there is none).
func kernelRDMADevices() []string {
	ents, err := os.ReadDir("/sys/class/infiniband")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, filepath.Base(e.Name()))
	}
	sort.Strings(names)
	return names
}
