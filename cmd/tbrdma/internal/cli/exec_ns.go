package cli

import (
	"fmt"
	"path"
	"strings"

	"github.com/tbrdma/tbrdma/verbs"
)

// The device view of "tbrdma exec" (docs/cabi.md, "Device files").
//
// Some programs look for an RDMA device outside libibverbs before they use
// it: UCX (and so OpenMPI's pml ucx) skips a device unless
// /dev/infiniband/<its uverbs name> is a character device it may read and
// write, and reads the type of each GID from
// /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/<index> (a missing
// file means RoCE v1). A host with no RDMA in the kernel has neither. So
// exec can run the program in a private mount namespace (with a user
// namespace as well when it may not mount) in which /dev is a tmpfs
// holding the host's entries bound from the real /dev plus
// /dev/infiniband/uverbsN and rdma_cm (/dev/null bound onto them), and
// /sys/class is a tmpfs holding the host's classes bound from the real one
// plus infiniband/ and infiniband_verbs/ trees written from the library's
// own device list. This file holds what does not depend on the operating
// system: the mode and the contents of that tree.

// nsEnv chooses the device view when --ns is not given.
const nsEnv = "TBRDMA_EXEC_NS"

// nsMode says when exec gives the program the device view.
type nsMode string

const (
	// nsAuto: when the host lacks the files for the library's devices;
	// when the view cannot be made, the program runs without it after a
	// one-line note.
	nsAuto nsMode = "auto"
	nsOn   nsMode = "on"  // always; exit 126 when it cannot be made
	nsOff  nsMode = "off" // never: exec replaces itself with the program
)

func parseNSMode(s string) (nsMode, error) {
	switch m := nsMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return nsAuto, nil
	case nsAuto, nsOn, nsOff:
		return m, nil
	case "1", "yes", "true":
		return nsOn, nil
	case "0", "no", "false":
		return nsOff, nil
	}
	return "", fmt.Errorf("%q is not auto, on or off", s)
}

// uverbsName is the device file name (ibv_device.dev_name) the library
// gives the index-th device it lists: cabi/device.go names them uverbs0,
// uverbs1 … in the order of verbs.Devices(nil), as the kernel numbers its
// uverbs devices.
func uverbsName(index int) string { return fmt.Sprintf("uverbs%d", index) }

// viewFile is one file of the sysfs part of the view; name is relative to
// /sys/class.
type viewFile struct {
	name, data string
}

// netdevFile reads a file of a network interface's parent device
// (/sys/class/net/NETDEV/device/FILE), reporting whether it exists.
type netdevFile func(netdev, file string) (string, bool)

// sysfsView returns the files of /sys/class/infiniband and
// /sys/class/infiniband_verbs for devs, listed in the library's order, as
// rdma_rxe's sysfs shows them where it matters to the programs that read
// them: the GID table with its types and network devices, the port's state
// and link layer, and the device's NUMA node and local CPUs (those of the
// interface's parent device when it has one; else no NUMA node, -1, and
// every CPU).
//
// The GID table is the library's (cabi/device.go gidAt, cabi/verbs.c
// query_entry), which keeps rxe's layout of two entries per address: the
// k-th address at 2k and 2k+1, "IB/RoCE v1" and then "RoCE v2" (tbrdma
// refuses the v1 ones, as rxe does).
func sysfsView(devs []*verbs.Device, hw netdevFile, cpus string) []viewFile {
	var out []viewFile
	add := func(name, format string, args ...any) {
		out = append(out, viewFile{name: name, data: fmt.Sprintf(format, args...) + "\n"})
	}
	add("infiniband_verbs/abi_version", "6")
	for i, d := range devs {
		dir := path.Join("infiniband", d.Name)
		guid := d.NodeGUID.String()
		add(path.Join(dir, "node_type"), "1: CA")
		add(path.Join(dir, "node_guid"), "%s", guid)
		add(path.Join(dir, "sys_image_guid"), "%s", guid)
		add(path.Join(dir, "fw_ver"), "%s", d.QueryDevice().FWVer)
		numa, ok := hw(d.Netdev, "numa_node")
		if !ok {
			numa = "-1"
		}
		add(path.Join(dir, "device", "numa_node"), "%s", numa)
		local, ok := hw(d.Netdev, "local_cpus")
		if !ok {
			local = cpus
		}
		if local != "" {
			add(path.Join(dir, "device", "local_cpus"), "%s", local)
		}
		port := path.Join(dir, "ports", "1")
		add(path.Join(port, "state"), "%d: %s", d.PortState, d.PortState)
		add(path.Join(port, "phys_state"), "%d: %s", d.PhysState, physStateSysfs(d.PhysState))
		add(path.Join(port, "link_layer"), "Ethernet")
		add(path.Join(port, "lid"), "0x0")
		add(path.Join(port, "sm_lid"), "0x0")
		add(path.Join(port, "lid_mask_count"), "0")
		add(path.Join(port, "pkeys", "0"), "0xffff")
		for k := range 2 * len(d.GIDs) {
			typ := "RoCE v2"
			if k%2 == 0 {
				typ = "IB/RoCE v1"
			}
			add(path.Join(port, "gids", fmt.Sprint(k)), "%s", sysfsGID(d.GIDs[k/2].GID))
			add(path.Join(port, "gid_attrs", "types", fmt.Sprint(k)), "%s", typ)
			add(path.Join(port, "gid_attrs", "ndevs", fmt.Sprint(k)), "%s", d.Netdev)
		}
		uv := path.Join("infiniband_verbs", uverbsName(i))
		add(path.Join(uv, "ibdev"), "%s", d.Name)
		add(path.Join(uv, "abi_version"), "1")
	}
	return out
}

// sysfsGID formats a GID as sysfs does: eight groups of four hex digits.
func sysfsGID(g [16]byte) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// physStateSysfs is the kernel's sysfs name of a physical port state.
func physStateSysfs(s verbs.PortPhysState) string {
	switch s {
	case verbs.PhysStateSleep:
		return "Sleep"
	case verbs.PhysStatePolling:
		return "Polling"
	case verbs.PhysStateDisabled:
		return "Disabled"
	case verbs.PhysStatePortConfigTraining:
		return "PortConfigurationTraining"
	case verbs.PhysStateLinkUp:
		return "LinkUp"
	case verbs.PhysStateLinkErrorRecovery:
		return "LinkErrorRecovery"
	case verbs.PhysStatePhyTest:
		return "Phy Test"
	}
	return "<unknown>"
}

// cpuMask formats CPUs 0..n-1 as a sysfs cpumask: 32-bit hex words, the
// most significant first, separated by commas ("ff", "ffffffff,0000000f").
func cpuMask(n int) string {
	if n <= 0 {
		return ""
	}
	words := (n + 31) / 32
	parts := make([]string, words)
	for w := range words {
		bits := min(n-32*w, 32)
		v := uint64(1)<<bits - 1
		parts[words-1-w] = fmt.Sprintf("%08x", uint32(v))
	}
	if words == 1 {
		return fmt.Sprintf("%x", uint32(uint64(1)<<min(n, 32)-1))
	}
	return strings.Join(parts, ",")
}
