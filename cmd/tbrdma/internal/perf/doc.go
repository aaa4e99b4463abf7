// Package perf holds what the tbrdma test commands share below their
// flags and output: the out-of-band exchanges of ibv_rc_pingpong and of
// perftest (byte for byte as the stock C tools speak them), the data-path
// loops that post work requests, wait for completions and time them, and
// the statistics and table text perftest reports. It prints nothing of its
// own accord: callers pass an io.Writer, and the loops write only the
// error lines the stock tools print when a completion fails.
//
// What lives where:
//
//   - oob.go, pingpong.go, qpchannel.go: the exchanges (Comm over TCP or,
//     with rdma_cm, over a QP's SENDs; PingpongDest).
//   - loop.go: Loop, one side's data path in a perftest test, and how it
//     reports a failed completion (ErrReported).
//   - bw.go (BW, ReceiveBW), lat.go (Lat, CheckAtomicTarget), sendloop.go
//     (PostRecvs, SendLat), writelat.go (WriteLat): perftest's run_iter_*
//     loops for WRITE, READ, SEND and atomics, client and server side.
//   - pingpongloop.go: Pingpong, ibv_rc_pingpong's and ibv_ud_pingpong's
//     loop.
//   - peerfail.go: what a failure says about the peer (PeerLabel), and the
//     silence watch that ends a ping-pong whose peer died.
//   - cq.go: the Waiter the loops wait on, and the poll-mode constants.
//   - stats.go, report.go: latency and bandwidth figures and perftest's
//     table lines.
//
// The commands in cmd/tbrdma/internal/cli set up the device, the QP and
// the exchange, call the loops once per message size, and print the rows.
//
// tbrdma's extensions ride in bytes the stock tools never read
// (docs/wire-format.md): the large-segment offer and the test hint that
// tells "tbrdma serve" or a one-test tbrdma server which test a client
// runs (Comm.Hint, Comm.AskHint, PingpongClientExchangeHint,
// PingpongServerExchangeHint, ReadPingpongDone); a server that will not
// run the client's test says why in a refusal line (Refuse, RefusedError).
package perf
