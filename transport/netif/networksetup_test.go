package netif

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readNetworksetup(t *testing.T, name string) []hardwarePort {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "networksetup", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return parseHardwarePorts(string(b))
}

func TestParseHardwarePorts(t *testing.T) {
	got := readNetworksetup(t, "macbook-pro-m3")
	want := []hardwarePort{
		{"Thunderbolt Bridge", "bridge0", "36:8d:e4:a1:7c:40"},
		{"Wi-Fi", "en0", "5c:e9:1e:8a:0f:21"},
		{"Thunderbolt 1", "en1", "36:8d:e4:a1:7c:40"},
		{"Thunderbolt 2", "en2", "36:8d:e4:a1:7c:44"},
		{"Thunderbolt 3", "en3", "36:8d:e4:a1:7c:48"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	// The VLAN section after the ports is not a port.
	mini := readNetworksetup(t, "mac-mini-m4-pro")
	if len(mini) != 10 {
		t.Fatalf("mac mini: %d ports, want 10: %+v", len(mini), mini)
	}
	if last := mini[len(mini)-1]; last.Device != "en8" {
		t.Errorf("mac mini: last port %+v, want en8", last)
	}

	old := readNetworksetup(t, "macbook-pro-2015")
	if i := slices.IndexFunc(old, func(p hardwarePort) bool { return p.Device == "bridge0" }); i < 0 || old[i].MAC != "N/A" {
		t.Errorf("macbook pro 2015: bridge0 missing or wrong: %+v", old)
	}

	if got := parseHardwarePorts(""); len(got) != 0 {
		t.Errorf("empty output: %+v", got)
	}
	if got := parseHardwarePorts("Hardware Port: Dangling\n"); len(got) != 0 {
		t.Errorf("port without device: %+v", got)
	}
}

func TestClassifyPort(t *testing.T) {
	tests := []struct {
		port string
		kind string
		tb   bool
	}{
		{"Thunderbolt Bridge", KindThunderboltBridge, true},
		{"Thunderbolt 1", KindThunderbolt, true},
		{"Thunderbolt 12", KindThunderbolt, true},
		{"Thunderbolt Ethernet", KindEthernet, false},
		{"Thunderbolt Ethernet Slot 1", KindEthernet, false},
		{"Thunderbolt", KindOther, false},
		{"Thunderbolt 1a", KindOther, false},
		{"Wi-Fi", KindWireless, false},
		{"AirPort", KindWireless, false},
		{"Ethernet", KindEthernet, false},
		{"Ethernet Adapter (en4)", KindEthernet, false},
		{"USB 10/100/1000 LAN", KindEthernet, false},
		{"iPhone USB", KindOther, false},
		{"Bluetooth PAN", KindOther, false},
	}
	for _, tt := range tests {
		kind, tb := classifyPort(tt.port)
		if kind != tt.kind || tb != tt.tb {
			t.Errorf("classifyPort(%q) = %q, %v; want %q, %v", tt.port, kind, tb, tt.kind, tt.tb)
		}
	}
}

func TestApplyHardwarePorts(t *testing.T) {
	ports := readNetworksetup(t, "mac-mini-m4-pro")
	ifs := []Interface{
		{Name: "lo0", Loopback: true, Kind: KindLoopback},
		{Name: "en0"}, {Name: "en1"}, {Name: "en2"}, {Name: "en6"},
		{Name: "bridge0"}, {Name: "bridge100"}, {Name: "utun3"}, {Name: "xyz0"},
	}
	applyHardwarePorts(ifs, ports)
	want := []struct {
		kind, hw string
		tb       bool
	}{
		{KindLoopback, "", false},
		{KindEthernet, "Ethernet", false},
		{KindWireless, "Wi-Fi", false},
		{KindThunderbolt, "Thunderbolt 1", true},
		{KindEthernet, "Thunderbolt Ethernet Slot 1", false},
		{KindThunderboltBridge, "Thunderbolt Bridge", true},
		{KindVirtual, "", false}, // Internet Sharing's bridge
		{KindVirtual, "", false},
		{"", "", false},
	}
	for i, w := range want {
		if ifs[i].Kind != w.kind || ifs[i].Hardware != w.hw || ifs[i].Thunderbolt != w.tb {
			t.Errorf("%s: kind %q hardware %q thunderbolt %v; want %q %q %v",
				ifs[i].Name, ifs[i].Kind, ifs[i].Hardware, ifs[i].Thunderbolt, w.kind, w.hw, w.tb)
		}
	}
}
