package netif

import (
	"bufio"
	"strings"
)

// macOS names its network hardware in `networksetup -listallhardwareports`:
//
//	Hardware Port: Thunderbolt 1
//	Device: en2
//	Ethernet Address: 36:60:8a:4c:1d:00
//
// one blank-line-separated block per port, then a "VLAN Configurations"
// section. IP over Thunderbolt shows up as "Thunderbolt <N>" (one enX per
// receptacle) and "Thunderbolt Bridge" (bridge0, whose members the enX
// ports are). "Thunderbolt Ethernet" is something else: Apple's Thunderbolt
// to Gigabit Ethernet adapter, an ordinary Ethernet NIC.
//
// The parser is portable; netif_darwin.go runs the command.

// hardwarePort is one block of networksetup's output.
type hardwarePort struct {
	Port   string // "Thunderbolt 1"
	Device string // "en2"
	MAC    string // "36:60:8a:4c:1d:00", "N/A" or empty
}

// parseHardwarePorts parses the output of
// `networksetup -listallhardwareports`. Blocks without a device are
// skipped.
func parseHardwarePorts(out string) []hardwarePort {
	var ports []hardwarePort
	var cur hardwarePort
	flush := func() {
		if cur.Port != "" && cur.Device != "" {
			ports = append(ports, cur)
		}
		cur = hardwarePort{}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "VLAN Configurations") {
			break
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "Hardware Port":
			flush()
			cur.Port = val
		case "Device":
			cur.Device = val
		case "Ethernet Address":
			cur.MAC = val
		}
	}
	flush()
	return ports
}

// classifyPort returns the kind of a macOS hardware port and whether it
// carries IP over Thunderbolt.
func classifyPort(port string) (kind string, thunderbolt bool) {
	switch {
	case port == "Thunderbolt Bridge":
		return KindThunderboltBridge, true
	case isThunderboltPort(port):
		return KindThunderbolt, true
	case strings.Contains(port, "Wi-Fi") || strings.Contains(port, "AirPort"):
		return KindWireless, false
	case strings.Contains(port, "Ethernet") || strings.HasSuffix(port, " LAN"):
		return KindEthernet, false
	case strings.Contains(port, "Bridge"):
		return KindBridge, false
	}
	return KindOther, false
}

// isThunderboltPort reports whether port is "Thunderbolt <N>".
func isThunderboltPort(port string) bool {
	n, ok := strings.CutPrefix(port, "Thunderbolt ")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// virtualPrefixes name macOS interfaces with no hardware port: tunnels,
// Apple Wireless Direct Link, low-latency WLAN, Internet Sharing bridges …
var virtualPrefixes = []string{"utun", "gif", "stf", "awdl", "llw", "ipsec", "anpi", "ap", "bridge", "vmenet", "feth"}

// applyHardwarePorts fills in what networksetup knows about each
// interface.
func applyHardwarePorts(ifs []Interface, ports []hardwarePort) {
	byDev := make(map[string]hardwarePort, len(ports))
	for _, p := range ports {
		byDev[p.Device] = p
	}
	for i := range ifs {
		ifc := &ifs[i]
		if ifc.Loopback {
			continue
		}
		if p, ok := byDev[ifc.Name]; ok {
			ifc.Hardware = p.Port
			ifc.Kind, ifc.Thunderbolt = classifyPort(p.Port)
			continue
		}
		for _, pre := range virtualPrefixes {
			if strings.HasPrefix(ifc.Name, pre) {
				ifc.Kind = KindVirtual
				break
			}
		}
	}
}
