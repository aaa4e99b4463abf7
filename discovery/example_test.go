package discovery_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/tbrdma/tbrdma/discovery"
)

func Example() {
	ctx := context.Background()
	// Static peers need no network; mDNS peers come from Advertise on
	// the other machine.
	static, err := discovery.StaticPeers("lab-mac=198.18.0.2")
	if err != nil {
		panic(err)
	}
	p, err := discovery.Resolve(ctx, "lab-mac.local", &discovery.Options{Static: static})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Name, p.AddrPort(), p.GID)
	// Output: lab-mac 198.18.0.2:4791 ::ffff:198.18.0.2
}

func ExampleAdvertise() {
	ctx := context.Background()
	adv, err := discovery.Advertise(ctx, discovery.Service{
		Port:   4791,
		GID:    netip.MustParseAddr("::ffff:198.18.0.2"),
		MTU:    4096,
		Device: "tbrdma0",
		Caps:   []string{"rc", "ud", "atomic"},
	}, nil) // nil: the Thunderbolt interfaces
	if err != nil {
		fmt.Println(err)
		return
	}
	defer adv.Close() // sends goodbyes
	fmt.Println("advertising", adv.Name(), "as", adv.Host())
}
