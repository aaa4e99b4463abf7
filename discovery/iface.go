package discovery

import "github.com/tbrdma/tbrdma/transport/netif"

// listThunderbolt returns the names of the Thunderbolt interfaces that are
// up and have an address. It is a variable so tests can replace it.
var listThunderbolt = func() ([]string, error) {
	ifs, err := netif.List()
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range ifs {
		if ifs[i].Thunderbolt && ifs[i].IsUsable() {
			names = append(names, ifs[i].Name)
		}
	}
	return names, nil
}
