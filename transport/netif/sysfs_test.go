package netif

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadSysfs materializes the manifest testdata/sysfs/<name>.txt (format in
// testdata/sysfs/README) into a temporary directory and returns its root.
func loadSysfs(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "sysfs", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case strings.Contains(line, " -> "):
			path, target, _ := strings.Cut(line, " -> ")
			p := filepath.Join(root, filepath.FromSlash(path))
			if strings.HasPrefix(target, "/") {
				rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(root, filepath.FromSlash(target)))
				if err != nil {
					t.Fatalf("%s:%d: %v", name, n, err)
				}
				target = rel
			}
			mkdir(t, filepath.Dir(p))
			if err := os.Symlink(target, p); err != nil {
				t.Fatalf("%s:%d: %v", name, n, err)
			}
		case strings.Contains(line, " = "):
			path, content, _ := strings.Cut(line, " = ")
			p := filepath.Join(root, filepath.FromSlash(path))
			mkdir(t, filepath.Dir(p))
			if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
				t.Fatalf("%s:%d: %v", name, n, err)
			}
		case strings.HasSuffix(line, "/"):
			mkdir(t, filepath.Join(root, filepath.FromSlash(line)))
		default:
			t.Fatalf("%s:%d: cannot parse %q", name, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return root
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestReadSysfs(t *testing.T) {
	laptop := loadSysfs(t, "laptop")
	vm := loadSysfs(t, "vm")
	tests := []struct {
		root, name string
		want       sysfsInfo
	}{
		{laptop, "lo", sysfsInfo{kind: KindLoopback}},
		{laptop, "thunderbolt0", sysfsInfo{kind: KindThunderbolt, driver: "thunderbolt-net", thunderbolt: true, speed: 40e9, peer: "mac-studio"}},
		{laptop, "en05", sysfsInfo{kind: KindThunderbolt, driver: "thunderbolt-net", thunderbolt: true, speed: 10e9}},
		{laptop, "enp0s31f6", sysfsInfo{kind: KindEthernet, driver: "e1000e", speed: 1e9}},
		{laptop, "wlp0s20f3", sysfsInfo{kind: KindWireless, driver: "iwlwifi"}},
		{laptop, "eth0", sysfsInfo{kind: KindEthernet, driver: "virtio_net"}},
		{laptop, "br0", sysfsInfo{kind: KindBridge}},
		{laptop, "thunderbolt9", sysfsInfo{kind: KindThunderbolt, thunderbolt: true}},
		{laptop, "veth1", sysfsInfo{kind: KindVirtual}},
		{laptop, "wg0", sysfsInfo{kind: KindVirtual}},
		{vm, "lo", sysfsInfo{kind: KindLoopback}},
		{vm, "eth0", sysfsInfo{kind: KindEthernet, driver: "virtio_net"}},
		{vm, "ifb0", sysfsInfo{kind: KindVirtual}},
	}
	for _, tt := range tests {
		host := "laptop"
		if tt.root == vm {
			host = "vm"
		}
		t.Run(host+"/"+tt.name, func(t *testing.T) {
			got, ok := readSysfs(tt.root, tt.name)
			if !ok {
				t.Fatal("interface not found")
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, ok := readSysfs(laptop, "nosuch0"); ok {
		t.Error("found an interface sysfs does not have")
	}
}

func TestAnnotateFromSysfs(t *testing.T) {
	root := loadSysfs(t, "laptop")
	ifs := []Interface{{Name: "lo", Loopback: true, Kind: KindLoopback}, {Name: "en05"}, {Name: "gone0"}}
	annotateFromSysfs(ifs, root)
	if ifs[0].Kind != KindLoopback || ifs[0].Thunderbolt {
		t.Errorf("lo: %+v", ifs[0])
	}
	if !ifs[1].Thunderbolt || ifs[1].Kind != KindThunderbolt || ifs[1].Hardware != "thunderbolt-net" || ifs[1].Speed != 10e9 {
		t.Errorf("en05: %+v", ifs[1])
	}
	if ifs[2].Kind != "" || ifs[2].Thunderbolt {
		t.Errorf("interface unknown to sysfs changed: %+v", ifs[2])
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{
		"20.0 Gb/s": 20e9, "10 Gb/s": 10e9, "40.0 Gb/s\n": 40e9, "100 Mb/s": 100e6,
		"": 0, "fast": 0, "20.0": 0, "-1 Gb/s": 0,
	} {
		if got := parseRate(in); got != want {
			t.Errorf("parseRate(%q) = %d, want %d", in, got, want)
		}
	}
}
