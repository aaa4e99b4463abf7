//go:build !linux

package transport

import "net/netip"

// openNoNetpoll reports that Options.NoNetpoll is not available here: the
// endpoint uses package net's socket.
func openNoNetpoll(netip.AddrPort, bool, *Options, int, int, int) (rawSocket, bool, error) {
	return nil, false, nil
}
