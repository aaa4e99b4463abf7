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
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/tbrdma/tbrdma/verbs"
)

// Objects in use by other objects cannot be destroyed (EBUSY), as with the
// kernel's uverbs: a PD with MRs or QPs, a CQ or SRQ a QP uses, a channel
// a CQ is attached to.
type useCount struct{ n atomic.Int32 }

func (u *useCount) hold()      { u.n.Add(1) }
func (u *useCount) drop()      { u.n.Add(-1) }
func (u *useCount) busy() bool { return u.n.Load() > 0 }

// Go objects back to their states, for asynchronous events.
var (
	objMu  sync.Mutex
	qpsGo  = map[*verbs.QP]*qpState{}
	cqsGo  = map[*verbs.CQ]*cqState{}
	srqsGo = map[*verbs.SRQ]*srqState{}
)

func qpByGo(q *verbs.QP) *qpState {
	objMu.Lock()
	defer objMu.Unlock()
	return qpsGo[q]
}

func cqByGo(q *verbs.CQ) *cqState {
	objMu.Lock()
	defer objMu.Unlock()
	return cqsGo[q]
}

func srqByGo(q *verbs.SRQ) *srqState {
	objMu.Lock()
	defer objMu.Unlock()
	return srqsGo[q]
}

type pdState struct {
	ctx  *ctxState
	eng  *engine
	pd   *verbs.PD
	c    *C.struct_tb_pd
	uses useCount
}

func pdOf(h C.uintptr_t) *pdState { return cgo.Handle(h).Value().(*pdState) }

//export tbgo_alloc_pd
func tbgo_alloc_pd(h C.uintptr_t, errp *C.int) *C.struct_ibv_pd {
	cs := ctxOf(h)
	eng, err := cs.engineOf()
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	pd, err := eng.vctx.AllocPD()
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	eng.acquire()
	c := (*C.struct_tb_pd)(C.calloc(1, C.sizeof_struct_tb_pd))
	c.pd.context = cs.ibv()
	ps := &pdState{ctx: cs, eng: eng, pd: pd, c: c}
	c.h = C.uintptr_t(cgo.NewHandle(ps))
	c.pd.handle = C.uint32_t(c.h)
	return &c.pd
}

//export tbgo_dealloc_pd
func tbgo_dealloc_pd(h C.uintptr_t) C.int {
	ps := pdOf(h)
	if ps.uses.busy() {
		return C.int(syscall.EBUSY)
	}
	if err := ps.pd.Close(); err != nil {
		return C.int(errno(err))
	}
	ps.eng.release()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(ps.c))
	return 0
}

type mrState struct {
	pd *pdState
	mr *verbs.MR
	c  *C.struct_tb_mr
}

// Access flags that change nothing for tbrdma's memory (it pins nothing
// and binds no memory windows) and are accepted as rdma_rxe accepts them.
const (
	accessKnown    = C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_READ | C.IBV_ACCESS_REMOTE_ATOMIC
	accessIgnored  = C.IBV_ACCESS_MW_BIND | C.IBV_ACCESS_HUGETLB
	accessOptional = C.IBV_ACCESS_OPTIONAL_RANGE
)

//export tbgo_reg_mr
func tbgo_reg_mr(h C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, errp *C.int) *C.struct_ibv_mr {
	ps := pdOf(h)
	acc := uint(access) &^ uint(accessOptional)
	switch {
	case acc&C.IBV_ACCESS_ON_DEMAND != 0:
		// ib_check_mr_access: rxe (6.1) has no on-demand paging.
		*errp = C.int(syscall.EINVAL)
		return nil
	case acc&C.IBV_ACCESS_ZERO_BASED != 0:
		*errp = C.int(syscall.EOPNOTSUPP)
		return nil
	case acc&^uint(accessKnown|accessIgnored) != 0, length == 0,
		acc&(C.IBV_ACCESS_REMOTE_WRITE|C.IBV_ACCESS_REMOTE_ATOMIC) != 0 && acc&C.IBV_ACCESS_LOCAL_WRITE == 0:
		*errp = C.int(syscall.EINVAL)
		return nil
	case addr == nil:
		// Page 0 is never mapped: pinning it fails (EFAULT).
		*errp = C.int(syscall.EFAULT)
		return nil
	}
	write := acc&(C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_WRITE|C.IBV_ACCESS_REMOTE_ATOMIC) != 0
	if err := checkMapped(uintptr(addr), uint64(length), write); err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	buf := unsafe.Slice((*byte)(addr), int(length))
	mr, err := ps.pd.RegMRAt(buf, uint64(iova), verbs.AccessFlags(acc&accessKnown))
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	ps.uses.hold()
	c := (*C.struct_tb_mr)(C.calloc(1, C.sizeof_struct_tb_mr))
	c.mr.context = ps.ctx.ibv()
	c.mr.pd = &ps.c.pd
	c.mr.addr = addr
	c.mr.length = length
	c.mr.lkey = C.uint32_t(mr.LKey())
	c.mr.rkey = C.uint32_t(mr.RKey())
	ms := &mrState{pd: ps, mr: mr, c: c}
	c.h = C.uintptr_t(cgo.NewHandle(ms))
	c.mr.handle = C.uint32_t(c.h)
	return &c.mr
}

//export tbgo_dereg_mr
func tbgo_dereg_mr(h C.uintptr_t) C.int {
	ms := cgo.Handle(h).Value().(*mrState)
	ms.mr.Deregister()
	ms.pd.uses.drop()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(ms.c))
	return 0
}

// chState is a completion channel: its fd is an eventfd in semaphore
// mode, one count per event, so poll and epoll see it and a read is the
// wait ibv_get_cq_event blocks in (a cancellation point, as rping needs).
type chState struct {
	ctx  *ctxState
	eng  *engine
	ch   *verbs.CompChannel
	c    *C.struct_tb_channel
	uses useCount

	mu sync.Mutex
	q  []*cqState
}

func chOf(h C.uintptr_t) *chState { return cgo.Handle(h).Value().(*chState) }

//export tbgo_create_comp_channel
func tbgo_create_comp_channel(h C.uintptr_t, fd C.int, errp *C.int) *C.struct_ibv_comp_channel {
	cs := ctxOf(h)
	eng, err := cs.engineOf()
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	chs := &chState{ctx: cs, eng: eng}
	ch, err := eng.vctx.CreateCompChannelFunc(chs.notify)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	eng.acquire()
	chs.ch = ch
	c := (*C.struct_tb_channel)(C.calloc(1, C.sizeof_struct_tb_channel))
	c.ch.context = cs.ibv()
	c.ch.fd = fd
	chs.c = c
	c.h = C.uintptr_t(cgo.NewHandle(chs))
	return &c.ch
}

// notify is the channel's event hook: it runs on the engine's goroutine.
func (chs *chState) notify(cq *verbs.CQ) {
	qs := cqByGo(cq)
	if qs == nil {
		return
	}
	chs.mu.Lock()
	chs.q = append(chs.q, qs)
	chs.mu.Unlock()
	eventfdWrite(int(chs.c.ch.fd))
}

//export tbgo_destroy_comp_channel
func tbgo_destroy_comp_channel(h C.uintptr_t) C.int {
	chs := chOf(h)
	if chs.uses.busy() {
		return C.int(syscall.EBUSY)
	}
	chs.ch.Close()
	chs.eng.release()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(chs.c))
	return 0
}

// tbgo_channel_pop takes the event that the caller's read of the channel's
// eventfd accounted for.
//
// tbgo_channel_sleeping is called before the program blocks on the
// channel's fd (ibv_get_cq_event).
//
//export tbgo_channel_sleeping
func tbgo_channel_sleeping(h C.uintptr_t) { chOf(h).eng.kernelHint() }

//export tbgo_channel_pop
func tbgo_channel_pop(h C.uintptr_t, cq **C.struct_ibv_cq, cqctx *unsafe.Pointer) C.int {
	chs := chOf(h)
	chs.mu.Lock()
	defer chs.mu.Unlock()
	for len(chs.q) > 0 {
		qs := chs.q[0]
		chs.q = chs.q[1:]
		if qs.destroyed.Load() {
			continue
		}
		qs.delivered.Add(1)
		*cq = qs.ibv()
		*cqctx = qs.c.cq.cq_context
		return 0
	}
	return C.int(syscall.EAGAIN)
}

type cqState struct {
	ctx       *ctxState
	eng       *engine
	cq        *verbs.CQ
	c         *C.struct_tb_cq
	ch        *chState
	uses      useCount
	destroyed atomic.Bool
	delivered atomic.Uint32
	empties   atomic.Uint32 // empty polls in a row
}

func (qs *cqState) ibv() *C.struct_ibv_cq { return (*C.struct_ibv_cq)(unsafe.Pointer(&qs.c.cq)) }

func cqOf(h C.uintptr_t) *cqState { return cgo.Handle(h).Value().(*cqState) }

//export tbgo_create_cq
func tbgo_create_cq(h C.uintptr_t, cqe C.int, cqctx unsafe.Pointer, chh C.uintptr_t, vector C.int, wcFlags C.uint64_t, errp *C.int) *C.struct_ibv_cq {
	cs := ctxOf(h)
	if cqe < 1 || cqe > verbs.MaxCQE || vector < 0 || vector >= 1 {
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	eng, err := cs.engineOf()
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	var chs *chState
	var vch *verbs.CompChannel
	if chh != 0 {
		chs = chOf(chh)
		vch = chs.ch
	}
	cq, err := eng.vctx.CreateCQ(int(cqe), vch)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	eng.acquire()
	c := (*C.struct_tb_cq)(C.calloc(1, C.sizeof_struct_tb_cq))
	c.cq.context = cs.ibv()
	c.cq.cq_context = cqctx
	c.cq.cqe = cqe
	c.wc_flags = wcFlags
	if chs != nil {
		c.cq.channel = &chs.c.ch
		chs.uses.hold()
	}
	C.tb_init_cq_ex(c)
	qs := &cqState{ctx: cs, eng: eng, cq: cq, c: c, ch: chs}
	c.h = C.uintptr_t(cgo.NewHandle(qs))
	c.cq.handle = C.uint32_t(c.h)
	objMu.Lock()
	cqsGo[cq] = qs
	objMu.Unlock()
	return qs.ibv()
}

//export tbgo_destroy_cq
func tbgo_destroy_cq(h C.uintptr_t) C.int {
	qs := cqOf(h)
	if qs.uses.busy() {
		return C.int(syscall.EBUSY)
	}
	if err := qs.cq.Close(); err != nil {
		return C.int(errno(err))
	}
	qs.destroyed.Store(true)
	objMu.Lock()
	delete(cqsGo, qs.cq)
	objMu.Unlock()
	if qs.ch != nil {
		// Drop events not yet taken: the CQ is going away.
		qs.ch.mu.Lock()
		kept := qs.ch.q[:0]
		for _, e := range qs.ch.q {
			if e != qs {
				kept = append(kept, e)
			}
		}
		qs.ch.q = kept
		qs.ch.mu.Unlock()
		qs.ch.uses.drop()
	}
	qs.eng.release()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(qs.c))
	return 0
}

//export tbgo_req_notify_cq
func tbgo_req_notify_cq(h C.uintptr_t, solicited C.int) C.int {
	qs := cqOf(h)
	if qs.ch == nil {
		// The kernel arms a CQ without a channel too (rxe_req_notify_cq
		// returns 0); there is just no one to tell.
		return 0
	}
	qs.empties.Store(0)
	return C.int(errno(qs.cq.ReqNotify(solicited != 0)))
}

//export tbgo_ack_cq_events
func tbgo_ack_cq_events(h C.uintptr_t, n C.uint) {
	cqOf(h).cq.AckEvents(int(n))
}

// wcFlagsC maps verbs' completion flags to IBV_WC_*.
func wcFlagsC(f verbs.WCFlags) uint32 {
	var out uint32
	if f&verbs.WCFlagGRH != 0 {
		out |= C.IBV_WC_GRH
	}
	if f&verbs.WCFlagWithImm != 0 {
		out |= C.IBV_WC_WITH_IMM
	}
	if f&verbs.WCFlagWithInv != 0 {
		out |= C.IBV_WC_WITH_INV
	}
	return out
}

// tbgo_poll_cq moves up to n completions into out and returns how many,
// or -1 after an overrun (the CQ is in error), as rxe's poll does.
//
//export tbgo_poll_cq
func tbgo_poll_cq(h C.uintptr_t, n C.int, out *C.struct_tb_wc) C.int {
	qs := cqOf(h)
	var wcs [C.TB_CQ_BATCH]verbs.WC
	dst := unsafe.Slice(out, int(n))
	udSL := qs.eng.udRecvSL()
	total := 0
	for pass := 0; total < int(n); pass++ {
		m := min(len(wcs), int(n)-total)
		got, err := qs.cq.Poll(wcs[:m])
		if err != nil {
			if total == 0 {
				return -1
			}
			break
		}
		if got == 0 && total == 0 && pass == 0 && qs.eng.receiveInline() {
			continue // the packets this thread just handled may have completed something
		}
		for i := 0; i < got; i++ {
			w := &wcs[i]
			d := &dst[total+i]
			d.wr_id = C.uint64_t(w.WRID)
			d.status = C.uint32_t(w.Status)
			d.opcode = C.uint32_t(w.Opcode)
			d.vendor_err = C.uint32_t(w.VendorErr)
			d.byte_len = C.uint32_t(w.ByteLen)
			d.imm = C.uint32_t(w.ImmData)
			d.inv_rkey = C.uint32_t(w.InvalidatedRKey)
			d.qp_num = C.uint32_t(w.QPN)
			d.src_qp = C.uint32_t(w.SrcQP)
			d.wc_flags = C.uint32_t(wcFlagsC(w.Flags))
			d.pkey_index = C.uint16_t(w.PKeyIndex)
			d.sl = 0
			if w.Flags&verbs.WCFlagGRH != 0 {
				d.sl = udSL
			}
		}
		total += got
		if got < m {
			break
		}
	}
	if total == 0 {
		qs.eng.polled(qs.empties.Add(1))
	} else {
		qs.empties.Store(0)
		qs.eng.polled(0)
	}
	return C.int(total)
}

type srqState struct {
	ctx  *ctxState
	pd   *pdState
	srq  *verbs.SRQ
	c    *C.struct_tb_srq
	uses useCount
	mu   sync.Mutex
	wrs  []verbs.RecvWR
}

func srqOf(h C.uintptr_t) *srqState { return cgo.Handle(h).Value().(*srqState) }

//export tbgo_create_srq
func tbgo_create_srq(h C.uintptr_t, a *C.struct_ibv_srq_init_attr, errp *C.int) *C.struct_ibv_srq {
	ps := pdOf(h)
	if a == nil || a.attr.max_wr == 0 || a.attr.max_wr > verbs.MaxSRQWR || a.attr.max_sge > verbs.MaxSGE {
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	srq, err := ps.pd.CreateSRQ(verbs.SRQAttr{MaxWR: int(a.attr.max_wr), MaxSGE: int(max(a.attr.max_sge, 1)), Limit: int(a.attr.srq_limit)})
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	ps.uses.hold()
	c := (*C.struct_tb_srq)(C.calloc(1, C.sizeof_struct_tb_srq))
	c.srq.context = ps.ctx.ibv()
	c.srq.srq_context = a.srq_context
	c.srq.pd = &ps.c.pd
	got := srq.Query()
	a.attr.max_wr = C.uint32_t(got.MaxWR)
	a.attr.max_sge = C.uint32_t(got.MaxSGE)
	ss := &srqState{ctx: ps.ctx, pd: ps, srq: srq, c: c}
	c.h = C.uintptr_t(cgo.NewHandle(ss))
	c.srq.handle = C.uint32_t(c.h)
	objMu.Lock()
	srqsGo[srq] = ss
	objMu.Unlock()
	return &c.srq
}

//export tbgo_modify_srq
func tbgo_modify_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	ss := srqOf(h)
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	if mask&C.IBV_SRQ_MAX_WR != 0 {
		// Resizing is not supported (the device does not claim SRQ_RESIZE
		// for it to work): rxe answers EINVAL for a size it cannot take.
		if int(a.max_wr) != ss.srq.Query().MaxWR {
			return C.int(syscall.EINVAL)
		}
	}
	if mask&C.IBV_SRQ_LIMIT != 0 {
		if int(a.srq_limit) > ss.srq.Query().MaxWR {
			return C.int(syscall.EINVAL)
		}
		return C.int(errno(ss.srq.Modify(int(a.srq_limit))))
	}
	return 0
}

//export tbgo_query_srq
func tbgo_query_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr) C.int {
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	q := srqOf(h).srq.Query()
	a.max_wr = C.uint32_t(q.MaxWR)
	a.max_sge = C.uint32_t(q.MaxSGE)
	a.srq_limit = C.uint32_t(q.Limit)
	return 0
}

//export tbgo_destroy_srq
func tbgo_destroy_srq(h C.uintptr_t) C.int {
	ss := srqOf(h)
	if ss.uses.busy() {
		return C.int(syscall.EBUSY)
	}
	if err := ss.srq.Close(); err != nil {
		return C.int(errno(err))
	}
	objMu.Lock()
	delete(srqsGo, ss.srq)
	objMu.Unlock()
	ss.pd.uses.drop()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(ss.c))
	return 0
}

//export tbgo_post_srq_recv
func tbgo_post_srq_recv(h C.uintptr_t, wrs *C.struct_tb_rwr, n C.int, done *C.int) C.int {
	ss := srqOf(h)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.wrs = recvWRs(ss.wrs[:0], wrs, n)
	k, err := ss.srq.PostRecv(ss.wrs...)
	*done = C.int(k)
	return C.int(errno(err))
}

// recvWRs converts C receive requests; the SGE lists alias the caller's
// memory (verbs.SGE has ibv_sge's layout) and are copied by PostRecv.
func recvWRs(dst []verbs.RecvWR, wrs *C.struct_tb_rwr, n C.int) []verbs.RecvWR {
	for _, w := range unsafe.Slice(wrs, int(n)) {
		var sgl []verbs.SGE
		if w.num_sge > 0 {
			sgl = unsafe.Slice((*verbs.SGE)(unsafe.Pointer(w.sge)), int(w.num_sge))
		}
		dst = append(dst, verbs.RecvWR{WRID: uint64(w.wr_id), SGList: sgl})
	}
	return dst
}

type ahState struct {
	pd *pdState
	ah *verbs.AH
	c  *C.struct_tb_ah
}

// ahAttr converts an ibv_ah_attr. RoCE needs a GRH (is_global), as the
// kernel's rdma_check_ah_attr insists, and a source GID index that names an
// entry of the table.
func ahAttr(d *verbs.Device, a *C.struct_ibv_ah_attr) (verbs.AHAttr, syscall.Errno) {
	// In the kernel's order (rdma_check_ah_attr, then rdma_get_gid_attr,
	// then rxe_av_chk_attr): the port must exist (port 0 does not), RoCE
	// needs a GRH, a source GID index with no entry is ENODATA, and one
	// naming a RoCE v1 entry (tbrdma's even indices stand for those) is
	// refused by rxe as EINVAL.
	if a.port_num != 1 || a.is_global == 0 {
		return verbs.AHAttr{}, syscall.EINVAL
	}
	if _, ok := gidAt(d, int(a.grh.sgid_index)); !ok {
		if int(a.grh.sgid_index) < gidTableLen(d) {
			return verbs.AHAttr{}, syscall.EINVAL
		}
		return verbs.AHAttr{}, syscall.ENODATA
	}
	var out verbs.AHAttr
	copy(out.DGID[:], unsafe.Slice((*byte)(unsafe.Pointer(&a.grh.dgid)), 16))
	out.SGIDIndex = uint8(a.grh.sgid_index)
	out.HopLimit = uint8(a.grh.hop_limit)
	out.TrafficClass = uint8(a.grh.traffic_class)
	out.FlowLabel = uint32(a.grh.flow_label)
	out.PortNum = 1
	if out.DGID.IsZero() {
		return verbs.AHAttr{}, syscall.EINVAL
	}
	return out, 0
}

//export tbgo_create_ah
func tbgo_create_ah(h C.uintptr_t, a *C.struct_ibv_ah_attr, errp *C.int) *C.struct_ibv_ah {
	ps := pdOf(h)
	if a == nil {
		*errp = C.int(syscall.EINVAL)
		return nil
	}
	attr, en := ahAttr(ps.ctx.dev, a)
	if en != 0 {
		*errp = C.int(en)
		return nil
	}
	ah, err := ps.pd.CreateAH(attr)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	ps.uses.hold()
	c := (*C.struct_tb_ah)(C.calloc(1, C.sizeof_struct_tb_ah))
	c.ah.context = ps.ctx.ibv()
	c.ah.pd = &ps.c.pd
	as := &ahState{pd: ps, ah: ah, c: c}
	c.h = C.uintptr_t(cgo.NewHandle(as))
	c.ah.handle = C.uint32_t(c.h)
	return &c.ah
}

//export tbgo_destroy_ah
func tbgo_destroy_ah(h C.uintptr_t) C.int {
	as := cgo.Handle(h).Value().(*ahState)
	as.ah.Close()
	as.pd.uses.drop()
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(as.c))
	return 0
}

// udRecvSL is the sl of the engine's UD receive completions. For RoCE,
// mlx5 reports there the L3 header type of the packet (2 IPv4, 1 IPv6:
// the PRM's RoCE packet type, bits 2:0), and UCX 1.13-1.18 reads it to
// find the destination address in the GRH area; rdma_rxe leaves it 0,
// which makes UCX drop every UD datagram over IPv4 (UCX 1.19 looks at the
// GRH area instead). An engine receives on the one address it is bound to.
func (e *engine) udRecvSL() C.uint8_t {
	if a := e.vctx.LocalAddr().Addr(); a.Is4() || a.Is4In6() {
		return 2
	}
	return 1
}
