package perf

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDurationLatency(t *testing.T) {
	s := DurationLatency(64, 1000, time.Second, 2)
	if !s.Timed || s.Size != 64 || s.Iters != 1000 || s.Avg != 500 || s.TPS != 1000 || s.Min != 0 || s.P99 != 0 {
		t.Errorf("ping-pong report %+v", s)
	}
	if s := DurationLatency(8, 4000, 2*time.Second, 1); s.Avg != 500 || s.TPS != 2000 {
		t.Errorf("READ report %+v", s)
	}
	if s := DurationLatency(2, 0, time.Second, 2); !s.Timed || s.Avg != 0 || s.TPS != 0 {
		t.Errorf("empty window: %+v", s)
	}
}

// TestPrintLatTimed: a duration row and its --out_json report in
// perftest's layout (REPORT_FMT_LAT_DUR, REPORT_FMT_LAT_DUR_JSON).
func TestPrintLatTimed(t *testing.T) {
	var b strings.Builder
	s := DurationLatency(64, 1000, time.Second, 2)
	PrintLat(&b, s)
	if want := " 64            1000            500.00         1000.00\n"; b.String() != want {
		t.Errorf("row\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	if err := WriteLatJSON(&b, &TestInfo{}, s); err != nil {
		t.Fatal(err)
	}
	want := "\"results\": {\n\"MsgSize\": 64,\n\"n_iterations\": 1000,\n\"t_avg\": 500.00,\n\"tps_average\": 1000.00\n}\n}\n"
	if !strings.HasSuffix(b.String(), want) || strings.Contains(b.String(), "t_min") {
		t.Errorf("--out_json report ends\n%q\nwant\n%q", b.String(), want)
	}
}

// TestLoopLatTimed runs read-lat and atomic-lat's client for a time with
// a margin: the run ends by itself with the window's figures; the atomics
// are still checked, and the server's target is reported, not checked
// against -n.
func TestLoopLatTimed(t *testing.T) {
	for _, c := range []struct {
		verb       Verb
		atomicType string
		size       int
	}{{VerbRead, "", 64}, {VerbAtomic, "FETCH_AND_ADD", 8}, {VerbAtomic, "CMP_AND_SWAP", 8}} {
		server, client := testPair(t, c.verb, 4096, 1)
		clear(server.Buf[:8])
		server.AtomicType, client.AtomicType = c.atomicType, c.atomicType
		client.Now = (&stepClock{step: time.Millisecond}).Now
		timed := &Timed{Duration: 400 * time.Millisecond, Margin: 100 * time.Millisecond}
		client.Timed, server.Timed = timed, timed
		s, err := client.Lat(context.Background(), server.dest(false), c.size)
		if err != nil {
			t.Fatalf("%v %s: %v\n%s", c.verb, c.atomicType, err, &client.errOut)
		}
		// Two readings of the clock per transaction, one in the window.
		if want := DurationLatency(c.size, uint64(s.Iters), 200*time.Millisecond, 1); !equalLat(s, want) || s.Iters < 90 || s.Iters > 110 {
			t.Errorf("%v %s: report %+v", c.verb, c.atomicType, s)
		}
		if c.verb != VerbAtomic {
			continue
		}
		if got := client.errOut.String(); !strings.Contains(got, "results checked") {
			t.Errorf("%s: client says %q", c.atomicType, got)
		}
		if err := server.CheckAtomicTarget(); err != nil || !strings.Contains(server.errOut.String(), "timed run of "+c.atomicType+" left ") {
			t.Errorf("%s: server: %v, says %q", c.atomicType, err, &server.errOut)
		}
	}
}

func equalLat(a, b LatStats) bool {
	return a.Timed == b.Timed && a.Size == b.Size && a.Iters == b.Iters && a.Avg == b.Avg && a.TPS == b.TPS
}

// TestLoopPingPongTimed runs write-lat and send-lat on both sides for a
// time: each side ends by itself, the one whose run ends first too, with
// a window that counted transactions; send-lat's receives are re-posted
// for as long as the run lasts (far more than -n).
func TestLoopPingPongTimed(t *testing.T) {
	const size = 32
	for _, verb := range []Verb{VerbWrite, VerbSend} {
		if verb == VerbWrite && raceEnabled {
			continue // write-lat polls memory the engine writes, as perftest
		}
		server, client := testPair(t, verb, os.Getpagesize(), 8)
		rems := map[*testSide]Dest{}
		for i, s := range []*testSide{server, client} {
			clear(s.Buf[s.Half:])
			s.Iters = 5 // ignored in a timed run
			s.Timed = &Timed{Duration: 300 * time.Millisecond}
			s.Now = (&stepClock{step: time.Duration(i+1) * time.Millisecond}).Now
			if verb == VerbSend {
				if err := s.PostRecvs(size); err != nil {
					t.Fatal(err)
				}
			}
		}
		rems[server], rems[client] = client.dest(true), server.dest(true)
		var mu sync.Mutex
		stats := map[*testSide]LatStats{}
		both(t, server, client, func(s *testSide) error {
			var st LatStats
			var err error
			if verb == VerbWrite {
				st, err = s.WriteLat(context.Background(), rems[s], size)
			} else {
				st, err = s.SendLat(context.Background(), size)
			}
			mu.Lock()
			defer mu.Unlock()
			stats[s] = st
			return err
		})
		for s, st := range stats {
			if !st.Timed || st.Size != size || st.Iters <= 5 || st.Avg <= 0 {
				t.Errorf("%v, server %v: report %+v", verb, s == server, st)
			}
		}
		if bytes.Contains(server.errOut.Bytes(), []byte("error")) || bytes.Contains(client.errOut.Bytes(), []byte("error")) {
			t.Errorf("%v: server says %q, client %q", verb, &server.errOut, &client.errOut)
		}
	}
}
