// Package verbs is an ibverbs-shaped API over a software RDMA engine that
// speaks RoCEv2 exactly as Linux SoftRoCE (rdma_rxe) does, so a peer may be
// another tbrdma process or a stock Linux host with rdma_rxe.
//
// # Devices
//
// [Devices] lists one soft device per usable network interface (up, with an
// address; loopback and the rest on request), Thunderbolt links first, as
// ibv_get_device_list does for rdma_rxe. A [Device] is named after its
// netdev ("tb_thunderbolt0", "tb_eth0"), has one port whose GID table holds
// a RoCE v2 GID per interface address (IPv4-mapped for IPv4), a node GUID
// derived from the MAC as rdma_rxe derives it, and an active MTU derived
// from the link MTU as rdma_rxe does ([MTUForLink]). [Device.QueryDevice]
// and [Device.QueryPort] return the ibv_query_device / ibv_query_port
// attributes and limits; [Device.Open] opens a Context on one of the
// device's addresses. A Device is a snapshot: list again to see changes.
//
// # Object model
//
// A [Context] is an open soft device: one UDP endpoint (port 4791 on one
// interface address), the memory region table, and every queue pair on it.
// From a Context come protection domains ([Context.AllocPD]), completion
// queues ([Context.CreateCQ]) and completion channels. From a [PD] come
// memory regions ([PD.RegMR]), queue pairs ([PD.CreateQP]), shared receive
// queues and address handles. A [QP] walks the ibverbs state machine
// RESET → INIT → RTR → RTS with [QP.Modify] and the same attribute masks
// ibv_modify_qp checks; work is posted with [QP.PostSend] and
// [QP.PostRecv]; results arrive as [WC] values polled from a [CQ].
//
// # Lifetimes
//
// An MR's buffer must stay untouched by other uses until
// [MR.Deregister] returns; from then on a remote access with its key fails
// with REM_ACCESS_ERR and no access to it is in progress. The memory named
// by a posted work request must not change until the request completes
// (inline sends copy at post time). Close on a QP flushes its outstanding
// work requests with WR_FLUSH_ERR; Close on the Context closes everything.
// As in ibverbs, objects close after those that use them: [CQ.Close],
// [SRQ.Close] and [PD.Close] refuse with [ErrBusy] (syscall.EBUSY) while a
// live QP, MR or AH still uses them, and say what to close first. A closed
// object answers [ErrClosed], which is also net.ErrClosed for errors.Is.
//
// [MR.RemoteBuffer] describes a region for a peer as a [RemoteBuffer]
// (address, length, rkey) with a 16-byte binary form for private data.
//
// # Concurrency
//
// Every method is safe for concurrent use. The Context runs one goroutine
// that receives packets and drives the responder and completer of each QP;
// each QP has a timer for retransmission and RNR waits. Posting runs the
// requester in the caller's goroutine and sends at once. [CQ.Poll] never
// blocks; [CQ.Wait] blocks until the CQ has a completion (it arms, polls,
// sleeps and acknowledges itself), and [CQ.WaitSpin] busy-polls first;
// [CompChannel.GetEvent] is the ibverbs way, blocking until an armed CQ
// gets a completion.
//
// # Engine
//
// Requester, responder and completer follow the IBTA and rdma_rxe: PMTU
// segmentation (FIRST/MIDDLE/LAST/ONLY), AckReq on the last packet of each
// message and every 64 packets, PSN sequence-error NAK and go-back-N, the
// retransmit timer (4.096 µs × 2^timeout) with retry_cnt, RNR NAK with the
// RNR timer table and rnr_retry, duplicate detection with READ replay and
// atomic result replay, max_rd_atomic enforcement, UD with Q_Key checks and
// the 40-byte GRH area. Unlike rdma_rxe, retry_cnt 7 means seven retries
// (IBTA), not infinitely many, so a vanished peer always ends in
// RETRY_EXC_ERR.
package verbs
