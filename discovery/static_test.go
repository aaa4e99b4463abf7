package discovery

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseStaticPeer(t *testing.T) {
	tests := []struct {
		in, name, addr string
		port           uint16
		gid            string
	}{
		{"lab=198.18.0.2", "lab", "198.18.0.2", 4791, "::ffff:198.18.0.2"},
		{" lab.local = 198.18.0.2:5000 ", "lab", "198.18.0.2", 5000, "::ffff:198.18.0.2"},
		{"mac=fe80::1%thunderbolt0", "mac", "fe80::1%thunderbolt0", 4791, "fe80::1"},
		{"mac=[fe80::1%tb0]:4792", "mac", "fe80::1%tb0", 4792, "fe80::1"},
	}
	for _, tt := range tests {
		p, err := ParseStaticPeer(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if p.Name != tt.name || p.Addrs[0] != netip.MustParseAddr(tt.addr) || p.Port != tt.port ||
			p.GID != netip.MustParseAddr(tt.gid) || !p.Static {
			t.Errorf("%q: got %+v", tt.in, p)
		}
	}
	for _, bad := range []string{"", "lab", "=198.18.0.2", "lab=", "lab=host.example", "lab=198.18.0.2:0", "lab=1.2.3.4:99999"} {
		if _, err := ParseStaticPeer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStaticPeers(t *testing.T) {
	ps, err := StaticPeers("a=198.18.0.2,b=198.18.0.3", "c=198.18.0.4")
	if err != nil || len(ps) != 3 || ps[2].Name != "c" {
		t.Fatalf("%v %v", ps, err)
	}
	ps, err = ReadStaticPeers(strings.NewReader("# peers\na=198.18.0.2 b=198.18.0.3:5000\n\n  c=fe80::1%tb0 # link-local\n"))
	if err != nil || len(ps) != 3 || ps[1].Port != 5000 {
		t.Fatalf("%v %v", ps, err)
	}
	if _, err := ReadStaticPeers(strings.NewReader("a=198.18.0.2\nbroken\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v, want line 2", err)
	}
}

func TestResolveStatic(t *testing.T) {
	ps, _ := StaticPeers("lab=198.18.0.2")
	p, err := Resolve(t.Context(), "LAB.local", &Options{Static: ps, Interfaces: []string{"does-not-exist"}})
	if err != nil || p.Name != "lab" {
		t.Fatalf("%+v %v", p, err)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"lab": "lab", "lab.local": "lab", "lab.LOCAL.": "lab", "lab._tbrdma._udp.local.": "lab", ".local": ".local",
	} {
		if got := trimLocal(in); got != want {
			t.Errorf("trimLocal(%q) = %q, want %q", in, got, want)
		}
	}
	for _, label := range []string{"plain", "with.dot", `back\slash`, "space and (2)", "ünïcode"} {
		got, ok := instanceOf(instanceFQDN(label))
		if !ok || got != label {
			t.Errorf("instanceOf(instanceFQDN(%q)) = %q, %v", label, got, ok)
		}
	}
	if _, ok := instanceOf("x._other._udp.local."); ok {
		t.Error("foreign service accepted")
	}
	if got := renamed("lab", 2, false); got != "lab (2)" {
		t.Error(got)
	}
	if got := sanitizeHost("my_host.name"); got != "my-host-name" {
		t.Error(got)
	}
}

func TestNoInterface(t *testing.T) {
	saved := listThunderbolt
	defer func() { listThunderbolt = saved }()
	listThunderbolt = func() ([]string, error) { return nil, nil }
	if _, err := Browse(t.Context(), nil); err != ErrNoInterface {
		t.Errorf("Browse: %v, want ErrNoInterface", err)
	}
	ps, _ := StaticPeers("lab=198.18.0.2")
	if got, err := Browse(t.Context(), &Options{Static: ps}); err != nil || len(got) != 1 {
		t.Errorf("Browse with static peers only: %v, %v", got, err)
	}
	if _, err := Advertise(t.Context(), Service{}, nil); err != ErrNoInterface {
		t.Errorf("Advertise: %v, want ErrNoInterface", err)
	}
}
