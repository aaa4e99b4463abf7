package verbstest

import (
	"runtime"
	"time"
)

var spins int

func yield() {
	spins++
	if spins%64 == 0 {
		time.Sleep(50 * time.Microsecond)
		return
	}
	runtime.Gosched()
}
