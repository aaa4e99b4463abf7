package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/tbrdma/tbrdma/transport/transporttest"
)

func TestParseFault(t *testing.T) {
	fs, err := parseFault("loss=1%, dup=0.005,corrupt=0.1%,reorder=2%,reorder-after=4,reorder-delay=3ms,delay=1ms,jitter=500us,burst=0.01/0.3/50%,seed=7")
	if err != nil {
		t.Fatal(err)
	}
	want := transporttest.Faults{Loss: 0.01, Duplicate: 0.005, Corrupt: 0.001, Reorder: 0.02, ReorderAfter: 4, ReorderDelay: 3 * time.Millisecond,
		Delay: time.Millisecond, Jitter: 500 * time.Microsecond, Burst: transporttest.GilbertElliott{P: 0.01, R: 0.3, LossBad: 0.5}}
	if fs.faults != want || fs.seed != 7 {
		t.Errorf("got %+v seed %d, want %+v seed 7", fs.faults, fs.seed, want)
	}
	// Without a seed one is drawn and shown, so that the run can be repeated.
	fs, err = parseFault("loss=1%")
	if err != nil || !strings.Contains(fs.text, ",seed=") {
		t.Errorf("no seed given: %v, text %q", err, fs.text)
	}
	for _, bad := range []string{"loss", "loss=2", "loss=-1%", "loss=x", "delay=-1ms", "delay=2h", "burst=0.1/0.2", "reorder-after=0", "colour=red", "seed=z", "loss=NaN"} {
		if _, err := parseFault(bad); err == nil {
			t.Errorf("%q: no error", bad)
		} else if !strings.Contains(err.Error(), "--fault") {
			t.Errorf("%q: error %q does not name the flag", bad, err)
		}
	}
}
