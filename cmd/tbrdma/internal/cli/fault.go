package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tbrdma/tbrdma/transport"
	"github.com/tbrdma/tbrdma/transport/transporttest"
)

// faultEnv is the environment variable --fault defaults to.
const faultEnv = "TBRDMA_FAULT"

// faultHelp describes --fault's value, for the flag and its errors.
const faultHelp = `comma-separated key=value: loss, dup, corrupt, reorder (probabilities, as 0.05 or 5%), reorder-after (packets), delay, jitter, reorder-delay (durations such as 2ms), burst=P/R/LOSS (Gilbert-Elliott: P good→bad, R bad→good, LOSS in the bad state), seed (default: random, printed)`

// faultSpec is a parsed --fault value.
type faultSpec struct {
	seed   uint64
	faults transporttest.Faults
	text   string
}

// parseFault reads a --fault value such as "loss=1%,dup=0.5%,seed=7".
func parseFault(spec string) (*faultSpec, error) {
	fs := &faultSpec{seed: rand.Uint64() >> 16, text: spec}
	f := &fs.faults
	seeded := false
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--fault %q: %q is not key=value (%s)", spec, kv, faultHelp)
		}
		var err error
		switch k {
		case "loss":
			f.Loss, err = parseProb(v)
		case "dup", "duplicate":
			f.Duplicate, err = parseProb(v)
		case "corrupt":
			f.Corrupt, err = parseProb(v)
		case "reorder":
			f.Reorder, err = parseProb(v)
		case "reorder-after":
			f.ReorderAfter, err = strconv.Atoi(v)
			if err == nil && (f.ReorderAfter < 1 || f.ReorderAfter > 1000) {
				err = fmt.Errorf("want 1..1000 packets")
			}
		case "reorder-delay":
			f.ReorderDelay, err = parseFaultDuration(v)
		case "delay":
			f.Delay, err = parseFaultDuration(v)
		case "jitter":
			f.Jitter, err = parseFaultDuration(v)
		case "burst":
			parts := strings.Split(v, "/")
			if len(parts) != 3 {
				err = fmt.Errorf("want P/R/LOSS")
				break
			}
			if f.Burst.P, err = parseProb(parts[0]); err == nil {
				if f.Burst.R, err = parseProb(parts[1]); err == nil {
					f.Burst.LossBad, err = parseProb(parts[2])
				}
			}
		case "seed":
			fs.seed, err = strconv.ParseUint(v, 0, 64)
			seeded = true
		default:
			return nil, fmt.Errorf("--fault %q: unknown key %q (%s)", spec, k, faultHelp)
		}
		if err != nil {
			return nil, fmt.Errorf("--fault %q: %s=%s: %v (%s)", spec, k, v, err, faultHelp)
		}
	}
	if !seeded {
		fs.text += fmt.Sprintf(",seed=%d", fs.seed)
	}
	return fs, nil
}

// parseProb reads a probability: 0.05 or 5%.
func parseProb(v string) (float64, error) {
	scale := 1.0
	if s, ok := strings.CutSuffix(v, "%"); ok {
		v, scale = s, 100
	}
	p, err := strconv.ParseFloat(v, 64)
	if err != nil || p != p {
		return 0, fmt.Errorf("not a number")
	}
	p /= scale
	if p < 0 || p > 1 {
		return 0, fmt.Errorf("a probability must lie in [0, 1] (or 0%%..100%%)")
	}
	return p, nil
}

func parseFaultDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("not a duration (such as 500us or 2ms)")
	}
	if d < 0 || d > time.Minute {
		return 0, fmt.Errorf("want 0..1m")
	}
	return d, nil
}

// withFault makes every device f opens inject the faults of s on its own
// traffic (sent packets; corruption on received ones), and says so on
// stderr once, with the seed that reproduces the run.
func withFault(f *Factory, s *faultSpec) {
	said := false
	f.WrapConn = func(c transport.Conn) transport.Conn {
		if !said {
			said = true
			fmt.Fprintf(f.IO.ErrOut, "tbrdma: injecting faults on %v: %s (test mode: --fault)\n", c.LocalAddr().Addr(), s.text)
		}
		return transporttest.Faulty(c, s.seed, s.faults)
	}
}

// faultFromFlagOrEnv returns the --fault value, else $TBRDMA_FAULT.
func faultFromFlagOrEnv(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(faultEnv)
}
