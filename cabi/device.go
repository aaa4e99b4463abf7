//go:build tbrdma_cabi

package main

/*
#include <stdlib.h>
#include <string.h>
#include "tbrdma.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/cgo"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// devEntry is a device the library has listed: its C struct lives for the
// life of the process (rdma-core frees devices only when nothing holds
// them, and programs keep ibv_device pointers after ibv_free_device_list).
type devEntry struct {
	name string
	cdev *C.struct_tb_device
}

var (
	devMu   sync.Mutex
	devList []*devEntry // by index; C's tb_device.index
	devByNm = map[string]*devEntry{}
)

// listDevices returns the devices a program sees: one per usable network
// interface, Thunderbolt links first, as `tbrdma devices` lists them.
func listDevices() ([]*verbs.Device, error) {
	return verbs.Devices(nil)
}

// deviceEntry returns the entry of d, making its C struct on first sight.
// devMu is held.
func deviceEntry(d *verbs.Device) *devEntry {
	if e := devByNm[d.Name]; e != nil {
		return e
	}
	cd := (*C.struct_tb_device)(C.calloc(1, C.sizeof_struct_tb_device))
	e := &devEntry{name: d.Name, cdev: cd}
	cd.index = C.int(len(devList))
	cd.dev.node_type = C.IBV_NODE_CA
	cd.dev.transport_type = C.IBV_TRANSPORT_IB
	setCString(cd.dev.name[:], d.Name)
	setCString(cd.dev.dev_name[:], fmt.Sprintf("uverbs%d", len(devList)))
	setCString(cd.dev.dev_path[:], fmt.Sprintf("/sys/class/infiniband_verbs/uverbs%d", len(devList)))
	setCString(cd.dev.ibdev_path[:], "/sys/class/infiniband/"+d.Name)
	var guid [8]byte
	binary.BigEndian.PutUint64(guid[:], uint64(d.NodeGUID))
	cd.guid_be = C.uint64_t(*(*uint64)(unsafe.Pointer(&guid[0])))
	devList = append(devList, e)
	devByNm[d.Name] = e
	return e
}

func setCString(dst []C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

// deviceOf returns the current snapshot of the device behind a C device.
func deviceOf(cd *C.struct_ibv_device) (*verbs.Device, error) {
	if cd == nil {
		return nil, syscall.EINVAL
	}
	devMu.Lock()
	i := int((*C.struct_tb_device)(unsafe.Pointer(cd)).index)
	if i < 0 || i >= len(devList) || unsafe.Pointer(devList[i].cdev) != unsafe.Pointer(cd) {
		devMu.Unlock()
		return nil, syscall.ENODEV
	}
	name := devList[i].name
	devMu.Unlock()
	d, err := verbs.DeviceByName(name)
	if err != nil {
		return nil, syscall.ENODEV
	}
	return d, nil
}

//export tbgo_get_device_list
func tbgo_get_device_list(num *C.int, errp *C.int) **C.struct_ibv_device {
	devs, err := listDevices()
	if err != nil {
		*errp = C.int(syscall.ENODEV)
		return nil
	}
	devMu.Lock()
	defer devMu.Unlock()
	list := (**C.struct_ibv_device)(C.calloc(C.size_t(len(devs)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	if list == nil {
		*errp = C.int(syscall.ENOMEM)
		return nil
	}
	arr := unsafe.Slice(list, len(devs)+1)
	for i, d := range devs {
		arr[i] = &deviceEntry(d).cdev.dev
	}
	if num != nil {
		*num = C.int(len(devs))
	}
	return list
}

// ctxState is an open device (struct ibv_context). Its engine — the
// verbs.Context with its UDP endpoint on port 4791 — is opened on first
// need (a PD, CQ or channel), so that ibv_devinfo and ibv_devices work
// beside a running tbrdma serve that holds the port.
type ctxState struct {
	c   *C.struct_tb_context
	dev *verbs.Device // snapshot at open; queries re-read the interface

	mu     sync.Mutex
	eng    *engine
	async  []C.struct_ibv_async_event
	closed bool
	snap   *verbs.Device // current's snapshot, taken at snapAt
	snapAt time.Time
}

func (cs *ctxState) ibv() *C.struct_ibv_context { return &cs.c.vc.context }

//export tbgo_open_device
func tbgo_open_device(cd *C.struct_ibv_device, errp *C.int) *C.struct_ibv_context {
	d, err := deviceOf(cd)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		*errp = C.int(errno(err))
		return nil
	}
	c := (*C.struct_tb_context)(C.calloc(1, C.sizeof_struct_tb_context))
	cs := &ctxState{c: c, dev: d}
	c.vc.context.device = cd
	c.vc.context.cmd_fd = -1
	c.vc.context.async_fd = C.int(efd)
	c.vc.context.num_comp_vectors = 1
	c.vc.sz = C.size_t(C.sizeof_struct_verbs_context)
	C.tb_fill_context_ops(c)
	c.h = C.uintptr_t(cgo.NewHandle(cs))
	return cs.ibv()
}

func ctxOf(h C.uintptr_t) *ctxState { return cgo.Handle(h).Value().(*ctxState) }

//export tbgo_close_device
func tbgo_close_device(h C.uintptr_t) C.int {
	cs := ctxOf(h)
	cs.mu.Lock()
	cs.closed = true
	eng := cs.eng
	cs.eng = nil
	cs.mu.Unlock()
	if eng != nil {
		eng.release()
	}
	unix.Close(int(cs.c.vc.context.async_fd))
	cgo.Handle(h).Delete()
	C.free(unsafe.Pointer(cs.c))
	return 0
}

// engineOf returns the context's engine, opening it on first use.
func (cs *ctxState) engineOf() (*engine, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.eng != nil {
		return cs.eng, nil
	}
	eng, err := acquireEngine(cs.dev)
	if err != nil {
		return nil, err
	}
	cs.eng = eng
	return eng, nil
}

// postAsync queues an asynchronous event for ibv_get_async_event.
func (cs *ctxState) postAsync(ev C.struct_ibv_async_event) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	cs.async = append(cs.async, ev)
	fd := int(cs.c.vc.context.async_fd)
	cs.mu.Unlock()
	eventfdWrite(fd)
}

//export tbgo_pop_async_event
func tbgo_pop_async_event(h C.uintptr_t, ev *C.struct_ibv_async_event) C.int {
	cs := ctxOf(h)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.async) == 0 {
		return C.int(syscall.EAGAIN)
	}
	*ev = cs.async[0]
	cs.async = cs.async[1:]
	return 0
}

func eventfdWrite(fd int) {
	C.tb_eventfd_write(C.int(fd), 1)
}

// engine is one verbs.Context per device, shared by every ibv_context
// and rdma_cm ID of the process on that device: the device's address has
// one UDP port 4791, and QP numbers are the device's.
type engine struct {
	name string
	vctx *verbs.Context
	refs int // under engMu
	stop context.CancelFunc
	done <-chan struct{}
	w    waiter
	// spinMu orders the starts and ends of spins (wait.go).
	spinMu sync.Mutex
	// cmKeep ends the engine's own rdma_cm presence (startCM).
	cmKeep func()
}

var (
	engMu   sync.Mutex
	engines = map[string]*engine{}
)

func acquireEngine(d *verbs.Device) (*engine, error) {
	engMu.Lock()
	defer engMu.Unlock()
	if e := engines[d.Name]; e != nil {
		e.refs++
		return e, nil
	}
	// Not bound to the device's interface: a program in the middle of a
	// routed chain (a rank whose peers reach it through either of its
	// links, docs/engines.md) gets its packets whichever link they took.
	// Outside the runtime's network poller: the program's own thread reads
	// the socket while it spins on a CQ (wait.go), and a socket in the
	// poller's epoll set woke a poller thread for every datagram, on the
	// program's core (docs/performance.md, the engines). TBRDMA_NETPOLL=1
	// keeps package net's socket.
	vctx, err := d.Open(&verbs.Options{AnyInterface: true, NoNetpoll: os.Getenv("TBRDMA_NETPOLL") != "1"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "tbrdma: cannot open device %s: %v\n", d.Name, err)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &engine{name: d.Name, vctx: vctx, refs: 1, stop: cancel, done: ctx.Done()}
	engines[d.Name] = e
	e.startWait()
	e.startCM()
	go e.asyncLoop(ctx)
	return e, nil
}

// startCM makes the device answer connection requests even when the
// program uses no rdma_cm, as the kernel's CM always does: a REQ for a
// port nobody listens on gets REJ 8 at once, instead of going unanswered
// until the requester gives up (about 98 s). An rdma_cm ID of the engine's
// own keeps package rdmacm's dispatcher running on the device.
func (e *engine) startCM() {
	ch, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		return
	}
	id, err := ch.CreateID(e.vctx, rdmacm.PSTCP)
	if err != nil {
		ch.Destroy()
		return
	}
	e.cmKeep = func() {
		id.Destroy()
		ch.Destroy()
	}
}

func (e *engine) acquire() {
	engMu.Lock()
	e.refs++
	engMu.Unlock()
}

func (e *engine) release() {
	engMu.Lock()
	e.refs--
	last := e.refs == 0
	if last {
		delete(engines, e.name)
	}
	engMu.Unlock()
	if last {
		e.stop()
		if e.cmKeep != nil {
			e.cmKeep()
		}
		e.vctx.Close()
	}
}

// asyncLoop routes the engine's asynchronous events to the ibv_context
// that created the object they concern.
func (e *engine) asyncLoop(ctx context.Context) {
	for {
		ev, err := e.vctx.GetAsyncEvent(ctx)
		if err != nil {
			return
		}
		var ce C.struct_ibv_async_event
		ce.event_type = C.enum_ibv_event_type(ev.Type)
		elem := (*unsafe.Pointer)(unsafe.Pointer(&ce.element))
		var owner *ctxState
		switch {
		case ev.QP != nil:
			if qs := qpByGo(ev.QP); qs != nil {
				*elem, owner = unsafe.Pointer(qs.c), qs.ctx
			}
		case ev.SRQ != nil:
			if ss := srqByGo(ev.SRQ); ss != nil {
				*elem, owner = unsafe.Pointer(ss.c), ss.ctx
			}
		case ev.CQ != nil:
			if qs := cqByGo(ev.CQ); qs != nil {
				*elem, owner = unsafe.Pointer(qs.c), qs.ctx
			}
		}
		if owner != nil {
			owner.postAsync(ce)
		}
	}
}

// gidAt maps the C library's GID index to the device's GID table. As on
// rdma_rxe, where every address has a RoCE v1 entry followed by a RoCE v2
// one, a device's table holds two entries per address; tbrdma speaks RoCE
// v2 only, so the even entries are empty and the odd ones hold the
// addresses: an IPv4 address is at index 1, where perftest's -x 1 and
// ibv_rc_pingpong's -g 1 expect it. (The GID queries of verbs.c read an
// even entry as rxe's RoCE v1 entry of the address after it: query_entry.)
func gidAt(d *verbs.Device, index int) (verbs.GIDEntry, bool) {
	if index < 0 || index%2 == 0 || index/2 >= len(d.GIDs) {
		return verbs.GIDEntry{}, false
	}
	return d.GIDs[index/2], true
}

func gidTableLen(d *verbs.Device) int { return 2 * len(d.GIDs) }

// gidIndexOf returns the C index of g in d's table, or -1.
func gidIndexOf(d *verbs.Device, g verbs.GID) int {
	for i, e := range d.GIDs {
		if e.GID == g {
			return 2*i + 1
		}
	}
	return -1
}

// current returns a snapshot of the device at most snapshotAge old: the
// queries see port state and addresses change without listing the
// interfaces again for every GID entry (a GID table read, or
// ibv_init_ah_from_wc for every datagram a UD server answers, asks for
// many).
func (cs *ctxState) current() *verbs.Device {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.snap != nil && time.Since(cs.snapAt) < snapshotAge {
		return cs.snap
	}
	cs.snap, cs.snapAt = cs.dev, time.Now()
	if d, err := verbs.DeviceByName(cs.dev.Name); err == nil {
		cs.snap = d
	}
	return cs.snap
}

// snapshotAge bounds how stale current's device snapshot may be.
const snapshotAge = 500 * time.Millisecond

//export tbgo_query_device
func tbgo_query_device(h C.uintptr_t, a *C.struct_ibv_device_attr) C.int {
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	fillDeviceAttr(ctxOf(h).dev, a)
	return 0
}

//export tbgo_query_device_ex
func tbgo_query_device_ex(h C.uintptr_t, a *C.struct_ibv_device_attr_ex, size C.size_t) C.int {
	if a == nil || size < C.size_t(unsafe.Sizeof(a.orig_attr)) {
		return C.int(syscall.EINVAL)
	}
	C.memset(unsafe.Pointer(a), 0, size)
	fillDeviceAttr(ctxOf(h).dev, &a.orig_attr)
	if size >= C.size_t(unsafe.Offsetof(a.phys_port_cnt_ex)+4) {
		a.phys_port_cnt_ex = 1
	}
	return 0
}

func fillDeviceAttr(d *verbs.Device, a *C.struct_ibv_device_attr) {
	da := d.QueryDevice()
	*a = C.struct_ibv_device_attr{}
	setCString(a.fw_ver[:], da.FWVer)
	a.node_guid = C.__be64(beU64(uint64(da.NodeGUID)))
	a.sys_image_guid = C.__be64(beU64(uint64(da.SysImageGUID)))
	a.max_mr_size = C.uint64_t(da.MaxMRSize)
	a.page_size_cap = C.uint64_t(da.PageSizeCap)
	a.vendor_id = C.uint32_t(da.VendorID)
	a.vendor_part_id = C.uint32_t(da.VendorPartID)
	a.hw_ver = C.uint32_t(da.HWVer)
	a.max_qp = C.int(da.MaxQP)
	a.max_qp_wr = C.int(da.MaxQPWR)
	a.device_cap_flags = C.uint(da.DeviceCapFlags)
	a.max_sge = C.int(da.MaxSGE)
	a.max_sge_rd = C.int(da.MaxSGERd)
	a.max_cq = C.int(da.MaxCQ)
	a.max_cqe = C.int(da.MaxCQE)
	a.max_mr = C.int(da.MaxMR)
	a.max_pd = C.int(da.MaxPD)
	a.max_qp_rd_atom = C.int(da.MaxQPRdAtom)
	a.max_qp_init_rd_atom = C.int(da.MaxQPInitRdAtom)
	a.max_res_rd_atom = C.int(da.MaxResRdAtom)
	a.atomic_cap = C.enum_ibv_atomic_cap(da.AtomicCap)
	a.max_srq = C.int(da.MaxSRQ)
	a.max_srq_wr = C.int(da.MaxSRQWR)
	a.max_srq_sge = C.int(da.MaxSRQSGE)
	a.max_ah = C.int(da.MaxAH)
	a.max_pkeys = C.uint16_t(da.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(da.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(da.PhysPortCnt)
}

// beU64 returns the value whose in-memory bytes are v big-endian.
func beU64(v uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return binary.NativeEndian.Uint64(b[:])
}

//export tbgo_query_port
func tbgo_query_port(h C.uintptr_t, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	d := ctxOf(h).current()
	pa, err := d.QueryPort(uint8(port))
	if err != nil {
		return C.int(syscall.EINVAL)
	}
	*a = C.struct_ibv_port_attr{}
	a.state = C.enum_ibv_port_state(pa.State)
	a.max_mtu = C.enum_ibv_mtu(pa.MaxMTU)
	a.active_mtu = C.enum_ibv_mtu(pa.ActiveMTU)
	a.gid_tbl_len = C.int(gidTableLen(d))
	a.port_cap_flags = C.uint32_t(pa.PortCapFlags)
	a.max_msg_sz = C.uint32_t(min(pa.MaxMsgSz, 1<<32-1))
	a.pkey_tbl_len = C.uint16_t(pa.PKeyTblLen)
	a.lid = C.uint16_t(pa.LID)
	a.sm_lid = C.uint16_t(pa.SMLID)
	a.lmc = C.uint8_t(pa.LMC)
	a.max_vl_num = C.uint8_t(pa.MaxVLNum)
	a.active_width = C.uint8_t(pa.ActiveWidth)
	a.active_speed = C.uint8_t(pa.ActiveSpeed)
	a.phys_state = C.uint8_t(pa.PhysState)
	a.link_layer = C.uint8_t(pa.LinkLayer)
	return 0
}

// tbgo_query_gid reads entry index of port's GID table: ENODATA for an
// empty entry, EINVAL beyond the table or for another port.
//
//export tbgo_query_gid
func tbgo_query_gid(h C.uintptr_t, port C.uint32_t, index C.int, gid *C.uint8_t, typ *C.uint32_t, ifindex *C.uint32_t) C.int {
	d := ctxOf(h).current()
	if port != 1 || index < 0 || int(index) >= max(gidTableLen(d), 1) {
		return C.int(syscall.EINVAL)
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(gid)), 16)
	e, ok := gidAt(d, int(index))
	if !ok {
		clear(out)
		return C.int(syscall.ENODATA)
	}
	copy(out, e.GID[:])
	if typ != nil {
		*typ = C.IBV_GID_TYPE_ROCE_V2
	}
	if ifindex != nil {
		*ifindex = C.uint32_t(d.Interface.Index)
	}
	return 0
}

//export tbgo_gid_table_len
func tbgo_gid_table_len(h C.uintptr_t) C.int { return C.int(gidTableLen(ctxOf(h).current())) }

//export tbgo_device_name_of
func tbgo_device_name_of(h C.uintptr_t) *C.char {
	return &ctxOf(h).c.vc.context.device.name[0]
}
