// Package perf holds what the tbrdma test commands share: the out-of-band
// TCP exchanges of ibv_rc_pingpong and of perftest (byte for byte as the
// stock C tools speak them), a CQ waiter, the latency and bandwidth
// statistics perftest reports, and the text of perftest's tables. It prints
// nothing itself: callers pass an io.Writer.
//
// tbrdma's extensions ride in bytes the stock tools never read
// (docs/wire-format.md): the large-segment offer and the test hint that
// tells "tbrdma serve" which test a client runs (Comm.Hint, Comm.AskHint,
// PingpongClientExchangeHint, ReadPingpongDone).
package perf
