// Package jsonout holds the versioned rows of tbrdma's machine output
// (--json, --csv). Each row carries schemaVersion; a breaking change to a
// row means a new VN type beside the old one, never an edit in place.
// Values are raw: bytes, nanoseconds, bits/s, packets/s.
package jsonout

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"
)

// BenchV1 is one result row of a perftest-family command (write-bw,
// read-lat, …): a bandwidth row has the bw_* and msg_rate_pps keys, a
// latency row the t_*, p99 and p999 keys.
type BenchV1 struct {
	SchemaVersion int    `json:"schemaVersion"` // 1
	Test          string `json:"test"`          // the command: "write-bw", "read-lat", …
	Role          string `json:"role"`          // "client" or "server"
	Bytes         uint64 `json:"bytes"`         // message size
	Iterations    uint64 `json:"iterations"`

	BWPeakBps  *float64 `json:"bw_peak_bps,omitempty"` // bits/s
	BWAvgBps   *float64 `json:"bw_avg_bps,omitempty"`  // bits/s
	MsgRatePps *float64 `json:"msg_rate_pps,omitempty"`

	TMinNs     *float64 `json:"t_min_ns,omitempty"`
	TMaxNs     *float64 `json:"t_max_ns,omitempty"`
	TTypicalNs *float64 `json:"t_typical_ns,omitempty"`
	TAvgNs     *float64 `json:"t_avg_ns,omitempty"`
	TStdevNs   *float64 `json:"t_stdev_ns,omitempty"`
	P99Ns      *float64 `json:"p99_ns,omitempty"`
	P999Ns     *float64 `json:"p999_ns,omitempty"`
}

// BenchV1Columns is the --csv header of BenchV1 rows, in order. It only
// ever grows at the end within schema version 1.
var BenchV1Columns = []string{"schemaVersion", "test", "role", "bytes", "iterations",
	"bw_peak_bps", "bw_avg_bps", "msg_rate_pps",
	"t_min_ns", "t_max_ns", "t_typical_ns", "t_avg_ns", "t_stdev_ns", "p99_ns", "p999_ns"}

// CSV returns the row's cells in the order of BenchV1Columns; a key the
// row does not have is an empty cell.
func (r *BenchV1) CSV() []string {
	f := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	return []string{strconv.Itoa(r.SchemaVersion), r.Test, r.Role,
		strconv.FormatUint(r.Bytes, 10), strconv.FormatUint(r.Iterations, 10),
		f(r.BWPeakBps), f(r.BWAvgBps), f(r.MsgRatePps),
		f(r.TMinNs), f(r.TMaxNs), f(r.TTypicalNs), f(r.TAvgNs), f(r.TStdevNs), f(r.P99Ns), f(r.P999Ns)}
}

// PingV1 is one iteration of "tbrdma ping --json" (type "reply").
type PingV1 struct {
	SchemaVersion int             `json:"schemaVersion"` // 1
	Type          string          `json:"type"`          // "reply"
	Peer          string          `json:"peer"`          // as given on the command line
	Addr          string          `json:"addr"`          // the peer's IP address
	Seq           int             `json:"seq"`           // from 1
	Bytes         int             `json:"bytes"`
	RTTNs         int64           `json:"rtt_ns"`
	OK            bool            `json:"ok"` // false: the echo differed (see mismatch)
	Mismatch      *PingMismatchV1 `json:"mismatch,omitempty"`
}

// PingMismatchV1 is the first byte of an echo that differed.
type PingMismatchV1 struct {
	Offset int  `json:"offset"`
	Want   byte `json:"want"`
	Got    byte `json:"got"`
}

// PingSummaryV1 is the last object of "tbrdma ping --json" (type
// "summary"), ping(8)'s statistics.
type PingSummaryV1 struct {
	SchemaVersion int        `json:"schemaVersion"` // 1
	Type          string     `json:"type"`          // "summary"
	Peer          string     `json:"peer"`
	Addr          string     `json:"addr,omitempty"`
	Transmitted   int        `json:"transmitted"`
	Received      int        `json:"received"`
	Errors        int        `json:"errors"`     // echoes that differed
	LossRatio     float64    `json:"loss_ratio"` // (transmitted-received)/transmitted, 0..1
	TimeNs        int64      `json:"time_ns"`    // the whole run
	RTT           *PingRTTV1 `json:"rtt,omitempty"`
}

// PingRTTV1 are the round-trip statistics of the replies (each round trip
// truncated to whole microseconds first, as ping(8) does).
type PingRTTV1 struct {
	MinNs  float64 `json:"min_ns"`
	AvgNs  float64 `json:"avg_ns"`
	MaxNs  float64 `json:"max_ns"`
	MdevNs float64 `json:"mdev_ns"`
}

// Round returns p rounded to digits decimal places (to drop the float
// noise of unit conversions).
func Round(v float64, digits int) float64 {
	s := math.Pow10(digits)
	return math.Round(v*s) / s
}

// Ptr returns a pointer to v.
func Ptr(v float64) *float64 { return &v }

// CSVWriter writes rows under a header line written before the first row.
type CSVWriter struct {
	w      *csv.Writer
	header []string
	begun  bool
}

// NewCSVWriter returns a CSVWriter of the columns header.
func NewCSVWriter(w io.Writer, header []string) *CSVWriter {
	return &CSVWriter{w: csv.NewWriter(w), header: header}
}

// Write writes one row (and the header first, once), and flushes.
func (c *CSVWriter) Write(cells []string) error {
	if !c.begun {
		c.begun = true
		if err := c.w.Write(c.header); err != nil {
			return err
		}
	}
	if err := c.w.Write(cells); err != nil {
		return err
	}
	c.w.Flush()
	return c.w.Error()
}
