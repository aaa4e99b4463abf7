package procstat

import (
	"os"
	"runtime"
	"testing"
)

func TestOpenFDsAndRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		if OpenFDs() != -1 || RSS() != 0 {
			t.Errorf("without /proc: OpenFDs %d, RSS %d; want -1 and 0", OpenFDs(), RSS())
		}
		return
	}
	n := OpenFDs()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if got := OpenFDs(); got != n+1 {
		t.Errorf("after opening a file: %d fds, want %d", got, n+1)
	}
	f.Close()
	if got := OpenFDs(); got != n {
		t.Errorf("after closing it: %d fds, want %d", got, n)
	}
	if RSS() == 0 {
		t.Error("RSS is 0 on Linux")
	}
}
