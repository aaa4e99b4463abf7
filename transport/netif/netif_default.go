//go:build !linux && !darwin

package netif

// annotate has nothing to add on this system: no interface is reported as
// Thunderbolt.
func annotate([]Interface) {}
