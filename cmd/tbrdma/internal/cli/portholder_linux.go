package cli

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portLookupCommand is the command that names the holder of proto's port
// where /proc does not (another user's process, without privileges).
func portLookupCommand(proto string, port int) string {
	if proto == "udp" {
		return fmt.Sprintf("sudo ss -lunp 'sport = :%d'", port)
	}
	return fmt.Sprintf("sudo ss -ltnp 'sport = :%d'", port)
}

// findPortHolder finds the process holding a local TCP or UDP (proto)
// port on addr (the zero Addr: any address): the socket's inode from
// /proc/net/{proto,proto6}, then the process with that inode among its
// open files. A socket on the wildcard address holds the port on every
// address. ok is false when the socket or its process cannot be found
// (another user's processes are not readable without privileges).
func findPortHolder(proto string, addr netip.Addr, port int) (portHolder, bool) {
	inodes := map[string]bool{}
	for _, f := range []string{proto, proto + "6"} {
		socketInodes(filepath.Join("/proc/net", f), addr, port, inodes)
	}
	if len(inodes) == 0 {
		return portHolder{}, false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return portHolder{}, false
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
				return describeProcess(pid), true
			}
		}
	}
	return portHolder{}, false
}

// socketInodes adds to inodes those of the sockets in the /proc/net table
// file whose local port is port (TCP: listening or bound; UDP: bound), on
// addr or the wildcard address when addr is valid.
func socketInodes(file string, addr netip.Addr, port int, inodes map[string]bool) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header line
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || !strings.HasSuffix(fields[1], want) || fields[9] == "0" {
			continue
		}
		if addr.IsValid() {
			a, ok := procNetAddr(strings.TrimSuffix(fields[1], want))
			if !ok || !(a.IsUnspecified() || a == addr.Unmap().WithZone("")) {
				continue
			}
		}
		inodes[fields[9]] = true
	}
}

// procNetAddr decodes a /proc/net address: the hex of the address's 32-bit
// words, each in the host's byte order (IPv4-mapped IPv6 addresses are
// returned unmapped).
func procNetAddr(s string) (netip.Addr, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.Addr{}, false
	}
	for i := 0; i < len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.NativeEndian.Uint32(b[i:]))
	}
	a, ok := netip.AddrFromSlice(b)
	return a.Unmap(), ok
}

// describeProcess reads pid's command name, and for tbrdma (a command
// whose name starts so) its subcommand (the first argument that is not a
// flag).
func describeProcess(pid int) portHolder {
	h := portHolder{PID: pid, Command: "a process"}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		h.Command = strings.TrimSpace(string(b))
	}
	if !strings.HasPrefix(h.Command, "tbrdma") {
		return h
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return h
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	for _, a := range args[min(1, len(args)):] {
		if len(a) > 0 && a[0] != '-' {
			h.Sub = string(a)
			break
		}
	}
	return h
}
