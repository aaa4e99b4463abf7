package cli

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tbrdma/tbrdma/verbs"
)

// listDevices is the device list -d names are looked up in (all devices,
// as verbs.DeviceByName sees them); a variable so that tests can replace it.
var listDevices = func() ([]*verbs.Device, error) {
	return verbs.Devices(&verbs.DeviceListOptions{All: true})
}

// resolveDeviceFlag reads -d (the stock tools' device flag): an IP address
// is used as --bind is; a device name must be one "tbrdma devices" prints
// (tb_thunderbolt0, or the netdev itself, thunderbolt0), whose first GID's
// address becomes the local address unless --bind (bind) is set. It
// returns the local address (the zero Addr: none given) and the device -d
// named (nil for an address or no -d).
func resolveDeviceFlag(bind netip.Addr, device string) (netip.Addr, *verbs.Device, error) {
	if device == "" {
		return bind, nil, nil
	}
	if a, err := netip.ParseAddr(device); err == nil {
		if bind.IsValid() {
			return bind, nil, nil
		}
		return a.Unmap(), nil, nil
	}
	devs, err := listDevices()
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("-d %s: %w", device, err)
	}
	for _, d := range devs {
		if d.Name != device && d.Netdev != device {
			continue
		}
		if bind.IsValid() {
			return bind, d, nil
		}
		if len(d.GIDs) == 0 {
			return netip.Addr{}, nil, FlagErrorf("-d %s: the device has no address (its interface %s has none): give the interface an address, or pick another device (tbrdma devices)", device, d.Netdev)
		}
		return d.GIDs[0].Addr.Unmap(), d, nil
	}
	return netip.Addr{}, nil, FlagErrorf("unknown device -d %s: %s", device, deviceChoices(devs, device))
}

// deviceChoices says which names -d takes: the usable devices "tbrdma
// devices" lists (loopback, down and address-less ones only when nothing
// else is there), and what a kernel device name such as rxe0 means here.
func deviceChoices(devs []*verbs.Device, device string) string {
	var usable, other []string
	for _, d := range devs {
		if d.PortState == verbs.PortActive && len(d.GIDs) > 0 && !d.Interface.Loopback {
			usable = append(usable, d.Name)
		} else {
			other = append(other, d.Name)
		}
	}
	var b strings.Builder
	switch {
	case len(usable) > 0:
		fmt.Fprintf(&b, "the devices are %s", strings.Join(usable, ", "))
		if len(other) > 0 {
			fmt.Fprintf(&b, " (and, not up or loopback, %s)", strings.Join(other, ", "))
		}
	case len(other) > 0:
		fmt.Fprintf(&b, "no device is up with an address; the others are %s", strings.Join(other, ", "))
	default:
		b.WriteString("there are no devices (no network interface)")
	}
	if slices.Contains(kernelRDMADevices(), device) || strings.HasPrefix(device, "rxe") || strings.HasPrefix(device, "mlx") {
		fmt.Fprintf(&b, "; %s is a kernel RDMA device, which tbrdma does not use", device)
	}
	b.WriteString(": give one of them, or the local IP address, or leave -d out (see tbrdma devices)")
	return b.String()
}

// checkGIDIndex checks a GID index flag (flag names it: -x, -g) against
// dev's GID table (nil: nothing to check); a negative index (pingpong's
// default -1) means none. Flag checks wrap its error in a FlagError.
func checkGIDIndex(flag string, idx int, dev *verbs.Device) error {
	if dev == nil || idx < 0 {
		return nil
	}
	n := len(dev.GIDs)
	if n == 0 {
		return fmt.Errorf("invalid %s %d: %s has no GID (its interface %s has no address): give it an address, or pick another device (tbrdma devices)", flag, idx, dev.Name, dev.Netdev)
	}
	if idx >= n {
		return fmt.Errorf("invalid %s %d: %s's GID table has %d %s, so the index is 0 to %d (tbrdma devices -v lists them)",
			flag, idx, dev.Name, n, plural(n, "entry", "entries"), n-1)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkPortActive fails when the device ctx opened has its port down (its
// interface is down or has no carrier): a test there could only time out.
// A context on an address no listed device has is not checked.
func checkPortActive(ctx *verbs.Context) error {
	d := ctx.Device()
	if d == nil || d.PortState == verbs.PortActive {
		return nil
	}
	return fmt.Errorf("device %s: port 1 is %v (interface %s is down or has no carrier): bring the link up (ip link set %s up; check the cable), or pick another device with -d or --bind (tbrdma devices)",
		d.Name, d.PortState, d.Netdev, d.Netdev)
}
