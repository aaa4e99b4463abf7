package netif

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Linux sysfs layout (Documentation/ABI/testing/sysfs-class-net,
// sysfs-bus-thunderbolt; drivers/net/thunderbolt/main.c):
//
//	<root>/class/net/<if>/type                 ARPHRD_*: 1 Ethernet, 772 loopback
//	<root>/class/net/<if>/speed                link speed in Mb/s (ethtool); absent or -1 when unknown
//	<root>/class/net/<if>/{wireless,phy80211}  present on Wi-Fi interfaces
//	<root>/class/net/<if>/bridge               present on bridges
//	<root>/class/net/<if>/device               link to the parent device; absent on virtual interfaces
//	        device/driver                      link whose base name is the driver: "thunderbolt-net"
//	        device/subsystem                   link whose base name is the bus: "thunderbolt"
//	        device/..                          for thunderbolt-net, the XDomain (the peer host):
//	                                           rx_speed "20.0 Gb/s" (per lane), rx_lanes, device_name
//
// This file is portable so that the tests run on every system, against the
// trees recorded in testdata/sysfs.

const (
	arphrdEther    = 1
	arphrdLoopback = 772

	thunderboltDriver = "thunderbolt-net"
	thunderboltBus    = "thunderbolt"
	thunderboltPrefix = "thunderbolt" // the kernel's thunderbolt%d name template
)

// annotateFromSysfs fills in what the sysfs tree at root knows about each
// interface.
func annotateFromSysfs(ifs []Interface, root string) {
	for i := range ifs {
		info, ok := readSysfs(root, ifs[i].Name)
		if !ok {
			continue
		}
		ifs[i].Hardware = info.driver
		ifs[i].Thunderbolt = info.thunderbolt
		ifs[i].Kind = info.kind
		ifs[i].Speed = info.speed
		ifs[i].Peer = info.peer
	}
}

// sysfsInfo is what sysfs says about one network interface.
type sysfsInfo struct {
	kind        string
	driver      string
	thunderbolt bool
	speed       uint64 // bits/s; 0 unknown
	peer        string
}

// readSysfs describes the interface called name from the sysfs tree at
// root ("/sys" on a live system). ok is false when sysfs does not know the
// interface.
func readSysfs(root, name string) (info sysfsInfo, ok bool) {
	dir := filepath.Join(root, "class", "net", name)
	if _, err := os.Stat(dir); err != nil {
		return info, false
	}
	dev, devErr := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	hasDev := devErr == nil
	if hasDev {
		info.driver = linkBase(filepath.Join(dev, "driver"))
		info.thunderbolt = info.driver == thunderboltDriver || linkBase(filepath.Join(dev, "subsystem")) == thunderboltBus
	}
	if strings.HasPrefix(name, thunderboltPrefix) {
		info.thunderbolt = true
	}
	typ, _ := readInt(filepath.Join(dir, "type"))
	switch {
	case typ == arphrdLoopback:
		info.kind = KindLoopback
	case info.thunderbolt:
		info.kind = KindThunderbolt
	case exists(filepath.Join(dir, "wireless")) || exists(filepath.Join(dir, "phy80211")):
		info.kind = KindWireless
	case exists(filepath.Join(dir, "bridge")):
		info.kind = KindBridge
	case !hasDev:
		info.kind = KindVirtual
	case typ == arphrdEther:
		info.kind = KindEthernet
	default:
		info.kind = KindOther
	}
	if info.thunderbolt && hasDev {
		// thunderbolt-net has no ethtool speed; the XDomain above the
		// service device knows the lanes.
		xd := filepath.Dir(dev)
		lanes, err := readInt(filepath.Join(xd, "rx_lanes"))
		if err != nil || lanes < 1 {
			lanes = 1
		}
		info.speed = parseRate(readString(filepath.Join(xd, "rx_speed"))) * uint64(lanes)
		info.peer = readString(filepath.Join(xd, "device_name"))
	}
	if info.speed == 0 {
		if mbps, err := readInt(filepath.Join(dir, "speed")); err == nil && mbps > 0 {
			info.speed = uint64(mbps) * 1e6
		}
	}
	return info, true
}

// parseRate parses a rate such as "20.0 Gb/s" or "10 Mb/s" into bits per
// second; 0 when it cannot.
func parseRate(s string) uint64 {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return 0
	}
	switch strings.TrimSpace(unit) {
	case "Gb/s", "Gbps", "Gb/sec":
		v *= 1e9
	case "Mb/s", "Mbps", "Mb/sec":
		v *= 1e6
	default:
		return 0
	}
	return uint64(v)
}

// linkBase returns the base name of the file a symbolic link points to, or
// "" when path is not a link.
func linkBase(path string) string {
	target, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
