//go:build tbrdma_cabi

package main

/*
#include <stdlib.h>
#include <string.h>
#include "tbrdma.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"syscall"
	"unsafe"

	"github.com/tbrdma/tbrdma/verbs"
)

type qpState struct {
	ctx    *ctxState
	pd     *pdState
	qp     *verbs.QP
	c      *C.struct_tb_qp
	scq    *cqState
	rcq    *cqState
	srq    *srqState
	sigAll bool

	mu   sync.Mutex // guards the scratch slices
	swrs []verbs.SendWR
	rwrs []verbs.RecvWR
}

func qpOf(h C.uintptr_t) *qpState { return cgo.Handle(h).Value().(*qpState) }

// tbgo_create_qp creates a QP (ibv_create_qp, ibv_create_qp_ex). The
// caller passes the handles of the PD, CQs and SRQ (0 for none).
//
//export tbgo_create_qp
func tbgo_create_qp(pdh, scqh, rcqh, srqh C.uintptr_t, a *C.struct_ibv_qp_init_attr_ex, ex C.int, errp *C.int) *C.struct_ibv_qp {
	if pdh == 0 || a == nil {
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	ps := pdOf(pdh)
	var typ verbs.QPType
	switch a.qp_type {
	case C.IBV_QPT_RC:
		typ = verbs.QPTypeRC
	case C.IBV_QPT_UC:
		typ = verbs.QPTypeUC
	case C.IBV_QPT_UD:
		typ = verbs.QPTypeUD
	case C.IBV_QPT_RAW_PACKET, C.IBV_QPT_XRC_SEND, C.IBV_QPT_DRIVER:
		// The kernel takes them; rxe_qp_chk_init refuses the type.
		*errp = C.int(syscall.EOPNOTSUPP)
		return nil
	default:
		// XRC_RECV without an XRC domain, or no such type: libibverbs
		// refuses it before the kernel (EINVAL).
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	if scqh == 0 || (rcqh == 0 && srqh == 0) {
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	if rcqh == 0 {
		rcqh = scqh
	}
	capv, en := qpCap(&a.cap)
	if en != 0 {
		*errp = C.int(en)
		return nil
	}
	scq, rcq := cqOf(scqh), cqOf(rcqh)
	init := verbs.QPInitAttr{Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: capv, SigAll: a.sq_sig_all != 0}
	var ss *srqState
	if srqh != 0 {
		ss = srqOf(srqh)
		init.SRQ = ss.srq
	}
	qp, err := ps.pd.CreateQP(&init)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	qs, en := wrapQP(ps, scq, rcq, ss, qp, a, ex != 0)
	if en != 0 {
		qp.Close()
		*errp = C.int(en)
		return nil
	}
	return &qs.c.qpx.qp_base
}

// qpCap checks the capacities a program asks of a QP against the device's
// limits (EINVAL beyond them) and raises zeros to one of each, as rdma_rxe
// hands out at least one.
func qpCap(c *C.struct_ibv_qp_cap) (verbs.QPCap, syscall.Errno) {
	capv := verbs.QPCap{
		MaxSendWR:     int(c.max_send_wr),
		MaxRecvWR:     int(c.max_recv_wr),
		MaxSendSGE:    int(c.max_send_sge),
		MaxRecvSGE:    int(c.max_recv_sge),
		MaxInlineData: int(c.max_inline_data),
	}
	if capv.MaxSendWR > verbs.MaxQPWR || capv.MaxRecvWR > verbs.MaxQPWR || capv.MaxSendSGE > verbs.MaxSGE ||
		capv.MaxRecvSGE > verbs.MaxSGE || capv.MaxInlineData > verbs.MaxInlineData {
		return verbs.QPCap{}, syscall.EINVAL
	}
	capv.MaxSendWR = max(capv.MaxSendWR, 1)
	capv.MaxRecvWR = max(capv.MaxRecvWR, 1)
	capv.MaxSendSGE = max(capv.MaxSendSGE, 1)
	capv.MaxRecvSGE = max(capv.MaxRecvSGE, 1)
	return capv, 0
}

// wrapQP makes the C QP for a verbs QP created on ps with the CQs and SRQ
// given (ss may be nil), writes the QP's actual capacities into a.cap, and
// takes the uses of the objects it holds. ex says whether ibv_qp_to_qp_ex
// answers for it (created by ibv_create_qp_ex with send ops). rdma_cm's
// rdma_create_qp wraps the QP package rdmacm created the same way.
func wrapQP(ps *pdState, scq, rcq *cqState, ss *srqState, qp *verbs.QP, a *C.struct_ibv_qp_init_attr_ex, ex bool) (*qpState, syscall.Errno) {
	got := qp.Query().Cap
	a.cap.max_send_wr = C.uint32_t(got.MaxSendWR)
	a.cap.max_send_sge = C.uint32_t(got.MaxSendSGE)
	a.cap.max_inline_data = C.uint32_t(got.MaxInlineData)
	if ss == nil {
		a.cap.max_recv_wr = C.uint32_t(got.MaxRecvWR)
		a.cap.max_recv_sge = C.uint32_t(got.MaxRecvSGE)
	} else {
		a.cap.max_recv_wr, a.cap.max_recv_sge = 0, 0
	}

	c := (*C.struct_tb_qp)(C.calloc(1, C.sizeof_struct_tb_qp))
	b := &c.qpx.qp_base
	b.context = ps.ctx.ibv()
	b.qp_context = a.qp_context
	b.pd = &ps.c.pd
	b.send_cq = scq.ibv()
	b.recv_cq = rcq.ibv()
	if ss != nil {
		b.srq = &ss.c.srq
	}
	b.qp_num = C.uint32_t(qp.QPN())
	b.state = C.IBV_QPS_RESET
	b.qp_type = a.qp_type
	c.cap_wr = C.uint32_t(got.MaxSendWR)
	c.cap_sge = C.uint32_t(got.MaxSendSGE)
	c.cap_inline = C.uint32_t(got.MaxInlineData)
	if ex {
		c.ex = 1
	}
	C.tb_init_qp_ex(c)
	if c.batch == nil {
		C.free(unsafe.Pointer(c))
		return nil, syscall.ENOMEM
	}
	ps.uses.hold()
	scq.uses.hold()
	rcq.uses.hold()
	if ss != nil {
		ss.uses.hold()
	}
	qs := &qpState{ctx: ps.ctx, pd: ps, qp: qp, c: c, scq: scq, rcq: rcq, srq: ss, sigAll: a.sq_sig_all != 0}
	c.h = C.uintptr_t(cgo.NewHandle(qs))
	b.handle = C.uint32_t(c.h)
	objMu.Lock()
	qpsGo[qp] = qs
	objMu.Unlock()
	return qs, 0
}

//export tbgo_destroy_qp
func tbgo_destroy_qp(h C.uintptr_t) C.int {
	qs := qpOf(h)
	objMu.Lock()
	delete(qpsGo, qs.qp)
	objMu.Unlock()
	qs.qp.Close()
	qs.scq.uses.drop()
	qs.rcq.uses.drop()
	if qs.srq != nil {
		qs.srq.uses.drop()
	}
	qs.pd.uses.drop()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(qs.c.batch))
	C.free(unsafe.Pointer(qs.c.batch_sge))
	C.free(unsafe.Pointer(qs.c.batch_inline))
	C.free(unsafe.Pointer(qs.c))
	return 0
}

// The ibv_qp_attr_mask bits verbs knows: the same numbers (IBV_QP_*).
const qpMaskKnown = C.IBV_QP_STATE | C.IBV_QP_CUR_STATE | C.IBV_QP_EN_SQD_ASYNC_NOTIFY | C.IBV_QP_ACCESS_FLAGS |
	C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_TIMEOUT |
	C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_ALT_PATH |
	C.IBV_QP_MIN_RNR_TIMER | C.IBV_QP_SQ_PSN | C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_PATH_MIG_STATE |
	C.IBV_QP_CAP | C.IBV_QP_DEST_QPN

//export tbgo_modify_qp
func tbgo_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	qs := qpOf(h)
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	if mask&^qpMaskKnown != 0 {
		// libibverbs refuses IBV_QP_RATE_LIMIT and above, the kernel's
		// uverbs the bits it does not define: EOPNOTSUPP.
		return C.int(syscall.EOPNOTSUPP)
	}
	var attr verbs.QPAttr
	attr.State = verbs.QPState(a.qp_state)
	attr.CurState = verbs.QPState(a.cur_qp_state)
	attr.PathMTU = verbs.MTU(a.path_mtu)
	attr.QKey = verbs.QKey(a.qkey)
	attr.RQPSN = verbs.PSN(a.rq_psn & 0xFFFFFF)
	attr.SQPSN = verbs.PSN(a.sq_psn & 0xFFFFFF)
	attr.DestQPN = verbs.QPN(a.dest_qp_num & 0xFFFFFF)
	attr.AccessFlags = verbs.AccessFlags(uint32(a.qp_access_flags) & accessKnown)
	attr.Cap = verbs.QPCap{
		MaxSendWR: int(a.cap.max_send_wr), MaxRecvWR: int(a.cap.max_recv_wr),
		MaxSendSGE: int(a.cap.max_send_sge), MaxRecvSGE: int(a.cap.max_recv_sge),
		MaxInlineData: int(a.cap.max_inline_data),
	}
	attr.PKeyIndex = uint16(a.pkey_index)
	attr.PortNum = uint8(a.port_num)
	attr.MinRNRTimer = uint8(a.min_rnr_timer)
	attr.Timeout = uint8(a.timeout)
	attr.RetryCnt = uint8(a.retry_cnt)
	attr.RNRRetry = uint8(a.rnr_retry)
	attr.MaxRdAtomic = uint8(a.max_rd_atomic)
	attr.MaxDestRdAtomic = uint8(a.max_dest_rd_atomic)
	if mask&C.IBV_QP_AV != 0 {
		ah, en := ahAttr(qs.ctx.dev, &a.ah_attr)
		if en != 0 {
			return C.int(en)
		}
		attr.AH = ah
	}
	if mask&C.IBV_QP_PORT != 0 && a.port_num != 1 {
		return C.int(syscall.EINVAL)
	}
	if mask&C.IBV_QP_STATE != 0 && a.qp_state > C.IBV_QPS_ERR {
		return C.int(syscall.EINVAL)
	}
	if err := qs.qp.Modify(&attr, verbs.QPAttrMask(mask)); err != nil {
		return C.int(errno(err))
	}
	if mask&C.IBV_QP_STATE != 0 {
		qs.c.qpx.qp_base.state = a.qp_state
	}
	return 0
}

//export tbgo_query_qp
func tbgo_query_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	qs := qpOf(h)
	if a == nil || init == nil {
		return C.int(syscall.EINVAL)
	}
	q := qs.qp.Query()
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = C.enum_ibv_qp_state(q.State)
	a.cur_qp_state = C.enum_ibv_qp_state(q.CurState)
	a.path_mtu = C.enum_ibv_mtu(q.PathMTU)
	a.path_mig_state = C.IBV_MIG_MIGRATED
	a.qkey = C.uint32_t(q.QKey)
	a.rq_psn = C.uint32_t(q.RQPSN)
	a.sq_psn = C.uint32_t(q.SQPSN)
	a.dest_qp_num = C.uint32_t(q.DestQPN)
	a.qp_access_flags = C.uint(q.AccessFlags)
	a.cap.max_send_wr = C.uint32_t(q.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(q.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(q.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(q.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(q.Cap.MaxInlineData)
	if qs.srq != nil {
		a.cap.max_recv_wr, a.cap.max_recv_sge = 0, 0
	}
	if !q.AH.DGID.IsZero() {
		a.ah_attr.is_global = 1
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)), 16), q.AH.DGID[:])
		a.ah_attr.grh.sgid_index = C.uint8_t(q.AH.SGIDIndex)
		a.ah_attr.grh.hop_limit = C.uint8_t(q.AH.HopLimit)
		a.ah_attr.grh.traffic_class = C.uint8_t(q.AH.TrafficClass)
		a.ah_attr.grh.flow_label = C.uint32_t(q.AH.FlowLabel)
		a.ah_attr.port_num = 1
	}
	a.pkey_index = C.uint16_t(q.PKeyIndex)
	a.max_rd_atomic = C.uint8_t(q.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(q.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(q.MinRNRTimer)
	a.port_num = 1
	a.timeout = C.uint8_t(q.Timeout)
	a.retry_cnt = C.uint8_t(q.RetryCnt)
	a.rnr_retry = C.uint8_t(q.RNRRetry)

	*init = C.struct_ibv_qp_init_attr{}
	b := &qs.c.qpx.qp_base
	init.qp_context = b.qp_context
	init.send_cq = b.send_cq
	init.recv_cq = b.recv_cq
	init.srq = b.srq
	init.cap = a.cap
	init.qp_type = b.qp_type
	if qs.sigAll {
		init.sq_sig_all = 1
	}
	return 0
}

// tbgo_post_send queues n flattened send work requests; *done says how
// many were queued (the first failed one is the caller's bad_wr).
//
//export tbgo_post_send
func tbgo_post_send(h C.uintptr_t, wrs *C.struct_tb_swr, n C.int, done *C.int) C.int {
	qs := qpOf(h)
	qs.mu.Lock()
	defer qs.mu.Unlock()
	out := qs.swrs[:0]
	for i, w := range unsafe.Slice(wrs, int(n)) {
		wr := verbs.SendWR{
			WRID:           uint64(w.wr_id),
			Opcode:         verbs.WROpcode(w.opcode),
			Flags:          verbs.SendFlags(w.flags),
			ImmData:        uint32(w.imm),
			InvalidateRKey: verbs.RKey(w.invalidate_rkey),
			RemoteAddr:     uint64(w.remote_addr),
			RKey:           verbs.RKey(w.rkey),
			CompareAdd:     uint64(w.compare_add),
			Swap:           uint64(w.swap),
			RemoteQPN:      verbs.QPN(w.remote_qpn & 0xFFFFFF),
			RemoteQKey:     verbs.QKey(w.remote_qkey),
		}
		if w.num_sge > 0 {
			wr.SGList = unsafe.Slice((*verbs.SGE)(unsafe.Pointer(w.sge)), int(w.num_sge))
		}
		if w.inline_data != nil {
			wr.Inline = unsafe.Slice((*byte)(w.inline_data), int(w.inline_len))
		} else if w.flags&C.IBV_SEND_INLINE != 0 {
			wr.Inline = []byte{}
		}
		if w.ah != 0 {
			as, ok := cgo.Handle(w.ah).Value().(*ahState)
			if !ok {
				*done = C.int(i)
				qs.post(out)
				return C.int(syscall.EINVAL)
			}
			wr.AH = as.ah
		}
		out = append(out, wr)
	}
	k, err := qs.post(out)
	*done = C.int(k)
	return C.int(errno(err))
}

func (qs *qpState) post(wrs []verbs.SendWR) (int, error) {
	k, err := qs.qp.PostSend(wrs...)
	for i := range wrs {
		wrs[i] = verbs.SendWR{} // drop references to C memory
	}
	qs.swrs = wrs[:0]
	return k, err
}

//export tbgo_post_recv
func tbgo_post_recv(h C.uintptr_t, wrs *C.struct_tb_rwr, n C.int, done *C.int) C.int {
	qs := qpOf(h)
	if qs.srq != nil {
		*done = 0
		return C.int(syscall.EINVAL)
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.rwrs = recvWRs(qs.rwrs[:0], wrs, n)
	k, err := qs.qp.PostRecv(qs.rwrs...)
	*done = C.int(k)
	clear(qs.rwrs)
	return C.int(errno(err))
}
