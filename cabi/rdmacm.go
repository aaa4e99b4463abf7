//go:build tbrdma_cabi

package main

/*
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "tbrdma.h"
#include "tbrdma_cm.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
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

// The librdmacm half of the library, over package rdmacm.
//
// An rdma_cm ID of a C program is a cmID. rdma_create_id knows no device;
// package rdmacm's IDs live on one verbs.Context, so a cmID gets its
// rdmacm.ID when the device is known: rdma_bind_addr to an address (that
// address's device), rdma_resolve_addr (the device the system routes the
// destination from, or the bound one). A bind to the wildcard address makes
// one rdmacm.ID per device, all bound to the same port, and rdma_listen
// listens on each, as the kernel's rdma_cm listens on every device; a
// later rdma_resolve_addr keeps the one on the chosen device.
//
// An event channel is a cmChannel: an rdmacm.EventChannel, a goroutine
// that moves its events into the cmChannel's queue, and an eventfd in
// semaphore mode with one count per queued event. rdma_get_cm_event reads
// the eventfd in C (a blocking read, a cancellation point; EAGAIN when the
// fd is O_NONBLOCK) and then takes the first queued event, which is only
// then turned into a struct rdma_cm_event and applied to the C ID (its
// addresses, route, QP state), as librdmacm does when it reads an event.
//
// A cmID lives until rdma_destroy_id and the acknowledgement of every
// event that names it, whichever is last, so that an unacknowledged event
// never points at freed memory (librdmacm makes rdma_destroy_id wait for
// the acknowledgements instead).
//
// Errors of the calls (-1 and errno). Package rdmacm's errors go through
// errno() (errno.go): ErrInvalidState and ErrInvalidArgument are EINVAL,
// ErrAddrInUse EADDRINUSE, ErrNotSupported EOPNOTSUPP, ErrDeviceRemoved
// ENODEV. This file adds: EADDRNOTAVAIL for a bind to an address no
// device has; ENETUNREACH when the system has no route to the destination,
// and EADDRNOTAVAIL when it routes from an address that is no device's (a
// message on stderr names the devices); ENODEV when there is no device;
// EADDRINUSE when a device's engine cannot open because another process
// holds its UDP port 4791 (acquireEngine says so on stderr); EOPNOTSUPP
// for RDMA_PS_IPOIB, UC and XRC QPs, multicast and rsockets; EINVAL for a
// call on a destroyed ID. In synchronous mode a call whose event reports a
// failure fails with the event's errno, ECONNREFUSED for REJECTED, as
// librdmacm's do.
//
// Events carry package rdmacm's Status unchanged, which follows the
// kernel's rdma_cm: REJECTED has the REJ reason (8: nothing listens on the
// port, 28: the application rejected), UNREACHABLE -ETIMEDOUT after the
// REQ's 16 sends (about 98 s: the peer runs no tbrdma and no rdma_rxe, so
// nothing answers) or the SIDR_REP status for UD (1: nothing listens),
// ROUTE_ERROR -ENETUNREACH, ADDR_ERROR a negative errno, DEVICE_REMOVAL
// -ENODEV.
//
// A peer that goes away: one that exits, even without destroying its IDs
// (the exit handler of rdmacm.c destroys them, as the kernel does for a
// process that ends), sends a DREQ, and DISCONNECTED comes at once. One
// killed by a signal, or whose link went down, sends nothing: the survivor
// learns it on the data path, when its QP's retries run out
// (IBV_WC_RETRY_EXC_ERR after retry_cnt+1 local ACK timeouts: 8 × 2.147 s
// = 17.2 s with the CM's attributes); it then calls rdma_disconnect, whose
// DREQ goes unanswered, and gets DISCONNECTED when the DREQ's retries run
// out (98.3 s on the active side, 65.5 s on the passive side;
// docs/reliability.md, "The connection manager after a cut"). An idle QP
// notices nothing, as over the kernel's rdma_cm when a peer host dies.

// cmMu guards every cmID and cmChannel and the device table.
var cmMu sync.Mutex

// cmDev is a device as rdma_cm uses it: one ibv_context per device,
// opened through the library's own ibv_open_device and shared by every ID
// (rdma_cm_id.verbs), with its engine and a default PD (rdma_cm_id.pd)
// made on first need.
type cmDev struct {
	name string
	ctx  *C.struct_ibv_context
	cs   *ctxState
	eng  *engine
	pd   *C.struct_ibv_pd
}

var cmDevs = map[string]*cmDev{} // by device name; kept for the life of the process

// cmDevOf opens (once) the rdma_cm context of d. cmMu is held.
func cmDevOf(d *verbs.Device) (*cmDev, syscall.Errno) {
	if cd := cmDevs[d.Name]; cd != nil {
		return cd, 0
	}
	devMu.Lock()
	e := deviceEntry(d)
	devMu.Unlock()
	var err C.int
	ctx := C.tb_cm_open_device(&e.cdev.dev, &err)
	if ctx == nil {
		return nil, syscall.Errno(err)
	}
	cd := &cmDev{name: d.Name, ctx: ctx, cs: ctxOf(C.tb_cm_ctx_handle(ctx))}
	cmDevs[d.Name] = cd
	return cd, 0
}

// engine opens the device's engine (its UDP endpoint) on first need.
func (cd *cmDev) engine() (*engine, syscall.Errno) {
	if cd.eng != nil {
		return cd.eng, 0
	}
	eng, err := cd.cs.engineOf()
	if err != nil {
		return nil, errno(err)
	}
	cd.eng = eng
	return eng, 0
}

// defaultPD is the PD rdma_cm gives IDs on the device (rdma_cm_id.pd).
func (cd *cmDev) defaultPD() *C.struct_ibv_pd {
	if cd.pd == nil {
		var err C.int
		cd.pd = C.tb_cm_alloc_pd(cd.ctx, &err)
	}
	return cd.pd
}

// The device list rdma_cm last read, for cmListDevices.
var (
	cmDevList   []*verbs.Device
	cmDevListAt time.Time
)

// cmListDevices lists the devices, reusing a list read less than 5 s
// ago: enumerating the interfaces takes milliseconds, and a server's
// rdma_bind_addr + rdma_listen must be quick, or a client that learnt out
// of band that the server is about to listen (perftest's handshake before
// its rdma_cm connection) sends its REQ first and is rejected. cmMu is
// held.
func cmListDevices() ([]*verbs.Device, error) {
	if cmDevList != nil && time.Since(cmDevListAt) < 5*time.Second {
		return cmDevList, nil
	}
	devs, err := listDevices()
	if err != nil {
		return nil, err
	}
	cmDevList, cmDevListAt = devs, time.Now()
	return devs, nil
}

// cmDevForAddr finds the device whose address is a. A device's engine
// receives on its first address (verbs.Device.GIDs[0]); another address of
// the interface is not usable for rdma_cm. cmMu is held.
func cmDevForAddr(a netip.Addr) (*cmDev, syscall.Errno) {
	a = a.Unmap().WithZone("")
	devs, err := cmListDevices()
	if err != nil {
		return nil, syscall.ENODEV
	}
	for _, d := range devs {
		if len(d.GIDs) > 0 && d.GIDs[0].Addr.Unmap().WithZone("") == a {
			return cmDevOf(d)
		}
	}
	return nil, syscall.EADDRNOTAVAIL
}

// cmDevForDst finds the device the system sends to dst from: the device
// of the source address a UDP socket connected to dst gets.
func cmDevForDst(dst netip.Addr) (*cmDev, syscall.Errno) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst.Unmap(), 4791)))
	if err != nil {
		return nil, syscall.ENETUNREACH
	}
	src := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
	c.Close()
	cd, en := cmDevForAddr(src)
	if en != 0 {
		fmt.Fprintf(os.Stderr, "tbrdma: rdma_resolve_addr %v: the system reaches it from %v, which is no tbrdma device's address "+
			"(tbrdma devices: %s); give a destination on a tbrdma link, or bind to a device's address first\n",
			dst, src, deviceAddrList())
	}
	return cd, en
}

func deviceAddrList() string {
	devs, _ := cmListDevices()
	s := ""
	for _, d := range devs {
		if len(d.GIDs) == 0 {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += d.Name + " " + d.GIDs[0].Addr.String()
	}
	if s == "" {
		s = "none"
	}
	return s
}

// cmDevByVctx is the device whose engine is vctx. cmMu is held.
func cmDevByVctx(vctx *verbs.Context) *cmDev {
	for _, cd := range cmDevs {
		if cd.eng != nil && cd.eng.vctx == vctx {
			return cd
		}
	}
	return nil
}

type cmChannel struct {
	c      *C.struct_tb_cm_channel
	gch    *rdmacm.EventChannel
	fd     int
	q      []*cmEvent
	closed bool
	owner  *cmID // the synchronous ID whose private channel this is
}

// cmEvent is a queued event: from package rdmacm (goEv) or made here.
type cmEvent struct {
	typ    rdmacm.EventType
	status int
	id     *cmID
	listen *cmID // CONNECT_REQUEST
	goEv   *rdmacm.Event
}

// cmOptions are what rdma_set_option stored. The ACK timeout goes to the
// connection's QP at RTS, as the kernel's CM does with it (perftest 24.10
// and later set their --qp-timeout so on -R connections); tbrdma's CM
// takes the traffic class of connections from its own defaults, as
// rdma_rxe's do without the option, and keeps the other values.
type cmOptions struct {
	tos, ackTimeout uint8
	ackTimeoutSet   bool
	reuseAddr       bool
	afOnly          bool
}

// applyACKTimeout hands rdma_set_option's ACK timeout, if one was set, to
// g before it connects or accepts.
func (o cmOptions) applyACKTimeout(g *rdmacm.ID) {
	if o.ackTimeoutSet {
		g.SetACKTimeout(o.ackTimeout) // checked by tbgo_cm_set_option
	}
}

type cmID struct {
	c      *C.struct_tb_cm_id
	ch     *cmChannel
	ps     rdmacm.PortSpace
	qpType C.enum_ibv_qp_type
	sync   bool

	dev  *cmDev
	id   *rdmacm.ID            // the ID on dev, once the device is known
	wild map[*cmDev]*rdmacm.ID // bound to the wildcard address: one ID per device

	bound    bool
	bindAddr netip.AddrPort
	listener *cmID
	offered  rdmacm.ConnParam // a connection request's parameters, this side's view
	qs       *qpState
	opts     cmOptions
	// established: rdma_establish sent the RTU. The kernel reports no
	// ESTABLISHED to the active side then (CONNECT_RESPONSE was its
	// event), so the one package rdmacm posts is dropped.
	established bool

	refs      int // the application's, and one per unacknowledged event
	destroyed bool
}

func cmOf(h C.uintptr_t) *cmID { return cgo.Handle(h).Value().(*cmID) }

// liveCM is the cmID of h unless rdma_destroy_id was called on it (its C
// struct lives on while events name it). cmMu is held.
func liveCM(h C.uintptr_t) *cmID {
	if m := cmOf(h); !m.destroyed {
		return m
	}
	return nil
}

func chanOf(h C.uintptr_t) *cmChannel { return cgo.Handle(h).Value().(*cmChannel) }

// newChannel makes an event channel. cmMu is held.
func newChannel() (*cmChannel, syscall.Errno) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return nil, errno(err)
	}
	gch, err := rdmacm.CreateEventChannel(nil)
	if err != nil {
		unix.Close(fd)
		return nil, errno(err)
	}
	c := (*C.struct_tb_cm_channel)(C.calloc(1, C.sizeof_struct_tb_cm_channel))
	c.ch.fd = C.int(fd)
	ch := &cmChannel{c: c, gch: gch, fd: fd}
	c.h = C.uintptr_t(cgo.NewHandle(ch))
	go ch.pump()
	return ch, 0
}

// pump moves package rdmacm's events into the queue, where they wait for
// rdma_get_cm_event.
func (ch *cmChannel) pump() {
	for {
		ev, err := ch.gch.GetEvent(context.Background())
		if err != nil {
			return
		}
		cmMu.Lock()
		pushGo(ev)
		cmMu.Unlock()
	}
}

// pushGo queues ev on the channel of the cmID it concerns (which a
// migration may have changed since package rdmacm posted it). A
// CONNECT_REQUEST gets its cmID here, before any event of the new ID can
// follow. cmMu is held.
func pushGo(ev *rdmacm.Event) {
	e := &cmEvent{typ: ev.Type, status: ev.Status, goEv: ev}
	if ev.Type == rdmacm.EventConnectRequest {
		ln, _ := ev.Listen.Context.(*cmID)
		if ln == nil || ln.destroyed || ln.ch.closed {
			ev.ID.Destroy() // refused: a REJ goes back
			return
		}
		child := newCMID(ln.ch, ln.ps, ln.qpType)
		child.listener = ln
		child.id = ev.ID
		child.offered = ev.Param
		if ev.UD != nil {
			child.qpType = C.IBV_QPT_UD
		}
		child.c.id.context = ln.c.id.context
		ev.ID.Context = child
		e.id, e.listen = child, ln
		ln.ch.enqueue(e)
		return
	}
	m, _ := ev.ID.Context.(*cmID)
	if m == nil || m.destroyed || (ev.Type == rdmacm.EventEstablished && m.established) {
		return
	}
	e.id = m
	m.ch.enqueue(e)
}

func (ch *cmChannel) enqueue(e *cmEvent) {
	if ch.closed {
		return
	}
	ch.q = append(ch.q, e)
	eventfdWrite(ch.fd)
}

// take removes the queued events f selects and the eventfd counts that
// stood for them.
func (ch *cmChannel) take(f func(*cmEvent) bool) []*cmEvent {
	var out []*cmEvent
	kept := ch.q[:0]
	for _, e := range ch.q {
		if f(e) {
			out = append(out, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(ch.q[len(kept):])
	ch.q = kept
	for range out {
		eventfdDrainOne(ch.fd)
	}
	return out
}

// eventfdDrainOne takes one count of the eventfd if one is there, without
// blocking (the fd may be in blocking mode: poll first). A reader racing
// for the same count then finds no event and waits for the next.
func eventfdDrainOne(fd int) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(pfd, 0); n != 1 {
		return
	}
	var b [8]byte
	unix.Read(fd, b[:])
}

// newCMID makes a cmID and its C struct. cmMu is held.
func newCMID(ch *cmChannel, ps rdmacm.PortSpace, qpType C.enum_ibv_qp_type) *cmID {
	c := (*C.struct_tb_cm_id)(C.calloc(1, C.sizeof_struct_tb_cm_id))
	m := &cmID{c: c, ch: ch, ps: ps, qpType: qpType, refs: 1}
	c.h = C.uintptr_t(cgo.NewHandle(m))
	c.id.channel = &ch.c.ch
	c.id.ps = C.enum_rdma_port_space(ps)
	c.id.qp_type = qpType
	return m
}

// release drops a reference; the last frees the C struct. cmMu is held.
func (m *cmID) release() {
	m.refs--
	if m.refs > 0 || !m.destroyed {
		return
	}
	cgo.Handle(m.c.h).Delete()
	m.c.h = 0
	quarantine(unsafe.Pointer(m.c))
	m.c = nil
}

// The C structs of destroyed IDs and channels are kept a while, their
// handle zeroed, before they are freed: a program that goes on using one
// after destroying it (perftest 4.5 retries a failed rdma_cm connection on
// the IDs and channel it has just destroyed) gets EINVAL, or EBADF from the
// closed fd, instead of a crash.
var quarantined []unsafe.Pointer

const quarantineLen = 256

func quarantine(p unsafe.Pointer) {
	quarantined = append(quarantined, p)
	if len(quarantined) > quarantineLen {
		C.free(quarantined[0])
		quarantined[0] = nil
		quarantined = quarantined[1:]
	}
}

// goIDs returns every rdmacm.ID of m.
func (m *cmID) goIDs() []*rdmacm.ID {
	var out []*rdmacm.ID
	if m.id != nil {
		out = append(out, m.id)
	}
	for _, g := range m.wild {
		out = append(out, g)
	}
	return out
}

// dropGoIDs destroys m's rdmacm IDs (what the kernel does on the wire for
// rdma_destroy_id: REJ, DREQ or DREP as the connection's state asks).
func (m *cmID) dropGoIDs() {
	for _, g := range m.goIDs() {
		g.Destroy()
	}
	m.id, m.wild = nil, nil
}

// newGoID makes an rdmacm.ID for m on cd. cmMu is held.
func (m *cmID) newGoID(cd *cmDev) (*rdmacm.ID, syscall.Errno) {
	eng, en := cd.engine()
	if en != 0 {
		return nil, en
	}
	if m.ch.closed {
		return nil, syscall.EINVAL
	}
	g, err := m.ch.gch.CreateID(eng.vctx, m.ps)
	if err != nil {
		return nil, errno(err)
	}
	g.Context = m
	return g, 0
}

// setDevice records the ID's device in its C struct: verbs, pd, port_num,
// as librdmacm does once the kernel names the device.
func (m *cmID) setDevice(cd *cmDev) {
	m.dev = cd
	m.c.id.verbs = cd.ctx
	m.c.id.pd = cd.defaultPD()
	m.c.id.port_num = 1
}

//export tbgo_cm_create_channel
func tbgo_cm_create_channel(errp *C.int) *C.struct_rdma_event_channel {
	cmMu.Lock()
	defer cmMu.Unlock()
	ch, en := newChannel()
	if en != 0 {
		*errp = C.int(en)
		return nil
	}
	return &ch.c.ch
}

// closeChannel destroys a channel. IDs still on it lose their connections
// (the kernel destroys the IDs of an rdma_cm file that is closed); their
// C structs stay until rdma_destroy_id. cmMu is held.
func (ch *cmChannel) closeChannel(ids bool) {
	if ch.closed {
		return
	}
	for _, e := range ch.q {
		if e.typ == rdmacm.EventConnectRequest && e.id != nil {
			e.id.dropGoIDs()
			e.id.destroyed = true
			e.id.release()
		}
	}
	ch.q = nil
	ch.closed = true
	if ids {
		for _, cd := range allLiveIDs() {
			if cd.ch == ch {
				cd.dropGoIDs()
			}
		}
	}
	ch.gch.Destroy()
	unix.Close(ch.fd)
	cgo.Handle(ch.c.h).Delete()
	ch.c.h = 0
	ch.c.ch.fd = -1
	quarantine(unsafe.Pointer(ch.c))
	ch.c = nil
}

// live cmIDs, for closeChannel.
var liveIDs = map[*cmID]struct{}{}

func allLiveIDs() []*cmID {
	out := make([]*cmID, 0, len(liveIDs))
	for m := range liveIDs {
		out = append(out, m)
	}
	return out
}

//export tbgo_cm_destroy_channel
func tbgo_cm_destroy_channel(h C.uintptr_t) {
	cmMu.Lock()
	defer cmMu.Unlock()
	chanOf(h).closeChannel(true)
}

// tbgo_cm_create_id makes an ID on the channel chh, or, with chh 0, on a
// private channel (synchronous mode).
//
//export tbgo_cm_create_id
func tbgo_cm_create_id(chh C.uintptr_t, ctx unsafe.Pointer, ps C.int, qpType C.int, out **C.struct_rdma_cm_id) C.int {
	switch rdmacm.PortSpace(ps) {
	case rdmacm.PSTCP, rdmacm.PSUDP, rdmacm.PSIB:
	default:
		return C.int(syscall.EOPNOTSUPP) // RDMA_PS_IPOIB: no IPoIB here
	}
	cmMu.Lock()
	defer cmMu.Unlock()
	var ch *cmChannel
	if chh == 0 {
		var en syscall.Errno
		if ch, en = newChannel(); en != 0 {
			return C.int(en)
		}
	} else {
		ch = chanOf(chh)
		if ch.closed {
			return C.int(syscall.EINVAL)
		}
	}
	m := newCMID(ch, rdmacm.PortSpace(ps), C.enum_ibv_qp_type(qpType))
	if chh == 0 {
		ch.owner = m
	}
	m.sync = chh == 0
	m.c.sync = C.int(b2i(m.sync))
	m.c.id.context = ctx
	liveIDs[m] = struct{}{}
	*out = &m.c.id
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

//export tbgo_cm_destroy_id
func tbgo_cm_destroy_id(h C.uintptr_t) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := cmOf(h)
	if m.destroyed {
		return C.int(syscall.EINVAL)
	}
	m.destroyed = true
	delete(liveIDs, m)
	m.dropGoIDs()
	if !m.ch.closed {
		// Events not yet read go with the ID; connection requests to a
		// listener go with their new IDs, which are refused.
		for _, e := range m.ch.take(func(e *cmEvent) bool { return e.id == m || e.listen == m }) {
			if e.listen == m && e.id != nil {
				e.id.dropGoIDs()
				e.id.destroyed = true
				e.id.release()
			}
		}
		if m.ch.owner == m {
			m.ch.closeChannel(false)
		}
	}
	m.release()
	return 0
}

// tbgo_cm_exit destroys the IDs left at exit (rdmacm.c, cm_at_exit). It
// gives up rather than wait long for a thread that holds cmMu.
//
//export tbgo_cm_exit
func tbgo_cm_exit() {
	// Bounded as a whole: an exit must not wait on a lock some other
	// thread of the exiting program holds (the DREQs are a courtesy to the
	// peers; without them they learn on the data path).
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(200 * time.Millisecond)
		for !cmMu.TryLock() {
			if time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		defer cmMu.Unlock()
		for m := range liveIDs {
			m.dropGoIDs()
		}
	}()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
}

// saOf reads a flattened socket address.
func saOf(s *C.struct_tb_cm_sa) (netip.AddrPort, bool) {
	if s == nil || s.family == 0 {
		return netip.AddrPort{}, false
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(s.addr[i])
	}
	a := netip.AddrFrom16(b)
	if s.family == C.AF_INET {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, uint16(s.port)), true
}

// bindLocked binds m to addr: an address of a device, or the wildcard
// (every device, one port). A loopback address (127.0.0.0/8, ::1) is the
// wildcard too, as in the kernel's rdma_cm (cma_any_addr): the ID gets no
// device and keeps the address it was given, which rdma_get_local_addr
// returns. libfabric's verbs provider relies on that: with no address to
// go on it binds to "localhost" and, finding id->verbs NULL, lists every
// device's address instead. cmMu is held.
func (m *cmID) bindLocked(addr netip.AddrPort) syscall.Errno {
	if m.bound || m.id != nil {
		return syscall.EINVAL
	}
	a := addr.Addr()
	if a.Unmap().IsLoopback() {
		// The devices' IDs bind to the unspecified address of the family.
		a = netip.IPv6Unspecified()
		if addr.Addr().Unmap().Is4() {
			a = netip.IPv4Unspecified()
		}
	}
	if !a.Unmap().IsUnspecified() {
		cd, en := cmDevForAddr(a)
		if en != 0 {
			return en
		}
		g, en := m.newGoID(cd)
		if en != 0 {
			return en
		}
		if err := g.Bind(netip.AddrPortFrom(a.Unmap(), addr.Port())); err != nil {
			g.Destroy()
			return errno(err)
		}
		m.id = g
		m.setDevice(cd)
		m.bound, m.bindAddr = true, g.LocalAddr()
		m.syncRoute(false)
		return 0
	}
	devs, err := cmListDevices()
	if err != nil || len(devs) == 0 {
		fmt.Fprintf(os.Stderr, "tbrdma: rdma_bind_addr %v: no tbrdma device (no network interface is up with an address)\n", addr)
		return syscall.ENODEV
	}
	var lastErr syscall.Errno
	for try := 0; try < 16; try++ {
		port := addr.Port()
		wild := map[*cmDev]*rdmacm.ID{}
		var en, openErr syscall.Errno
		for _, d := range devs {
			cd, e := cmDevOf(d)
			if e != 0 {
				openErr = e
				continue
			}
			g, e := m.newGoID(cd)
			if e != 0 {
				// A device whose engine cannot open (its UDP 4791 is
				// taken, acquireEngine said so): not listened on.
				openErr = e
				continue
			}
			if err := g.Bind(netip.AddrPortFrom(a, port)); err != nil {
				g.Destroy()
				en = errno(err)
				break
			}
			port = g.LocalAddr().Port()
			wild[cd] = g
		}
		if en == 0 && len(wild) > 0 {
			m.wild = wild
			m.bound, m.bindAddr = true, netip.AddrPortFrom(addr.Addr(), port)
			m.syncRoute(false)
			return 0
		}
		for _, g := range wild {
			g.Destroy()
		}
		if en == 0 {
			if openErr != 0 {
				return openErr
			}
			return syscall.ENODEV
		}
		lastErr = en
		if addr.Port() != 0 || en != syscall.EADDRINUSE {
			break // a chosen port is taken, or another failure: no retry
		}
	}
	return lastErr
}

//export tbgo_cm_bind
func tbgo_cm_bind(h C.uintptr_t, sa *C.struct_tb_cm_sa) C.int {
	ap, ok := saOf(sa)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	cmMu.Lock()
	defer cmMu.Unlock()
	m := liveCM(h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	// "::" is the wildcard as 0.0.0.0 is: every device (RDMA_OPTION_ID_AFONLY
	// changes nothing, the devices' addresses being IPv4).
	return C.int(m.bindLocked(ap))
}

// tbgo_cm_resolve_addr picks the device for dst (the bound one, the one
// src names, or the one the system routes dst from) and starts the
// resolution; ADDR_RESOLVED or ADDR_ERROR follows on the channel.
//
//export tbgo_cm_resolve_addr
func tbgo_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_tb_cm_sa, timeoutMs C.int) C.int {
	dstAP, ok := saOf(dst)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	cmMu.Lock()
	defer cmMu.Unlock()
	m := liveCM(h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	if srcAP, ok := saOf(src); ok && !m.bound {
		if en := m.bindLocked(srcAP); en != 0 {
			return C.int(en)
		}
	}
	if m.id == nil {
		cd, en := cmDevForDst(dstAP.Addr())
		if en != 0 {
			return C.int(en)
		}
		if m.wild != nil {
			g := m.wild[cd]
			delete(m.wild, cd)
			for _, o := range m.wild {
				o.Destroy()
			}
			m.wild = nil
			if g == nil {
				return C.int(syscall.EADDRNOTAVAIL)
			}
			m.id = g
		} else {
			g, en := m.newGoID(cd)
			if en != 0 {
				return C.int(en)
			}
			m.id = g
		}
		m.setDevice(cd)
	}
	m.c.id.port_num = 1
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if err := m.id.ResolveAddr(dstAP.String(), timeout); err != nil {
		return C.int(errno(err))
	}
	return 0
}

//export tbgo_cm_resolve_route
func tbgo_cm_resolve_route(h C.uintptr_t, timeoutMs C.int) C.int {
	cmMu.Lock()
	m := cmOf(h)
	g := m.id
	cmMu.Unlock()
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return C.int(errno(g.ResolveRoute(timeout)))
}

//export tbgo_cm_listen
func tbgo_cm_listen(h C.uintptr_t, backlog C.int) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := liveCM(h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	if !m.bound && m.id == nil {
		if en := m.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); en != 0 {
			return C.int(en)
		}
	}
	ids := m.goIDs()
	if len(ids) == 0 {
		return C.int(syscall.EINVAL)
	}
	for _, g := range ids {
		if err := g.Listen(int(backlog)); err != nil {
			return C.int(errno(err))
		}
	}
	m.syncRoute(false)
	return 0
}

// syncRoute writes m's addresses (and, with path, its one path) into the
// C struct. cmMu is held.
func (m *cmID) syncRoute(path bool) {
	var r C.struct_tb_cm_route
	local, remote := m.bindAddr, netip.AddrPort{}
	if m.id != nil {
		local, remote = m.id.LocalAddr(), m.id.RemoteAddr()
		if !local.IsValid() {
			local = m.bindAddr
		}
	}
	putSA(&r.src, local)
	putSA(&r.dst, remote)
	if local.IsValid() {
		g := gidOfAddr(local.Addr())
		for i := range g {
			r.sgid[i] = C.uint8_t(g[i])
		}
	}
	if remote.IsValid() {
		g := gidOfAddr(remote.Addr())
		for i := range g {
			r.dgid[i] = C.uint8_t(g[i])
		}
	}
	if path && m.id != nil {
		r.have_path = 1
		r.mtu = C.uint8_t(m.id.PathMTU())
		r.hop_limit = 64
		r.tclass = C.uint8_t(m.opts.tos)
	}
	C.tb_cm_set_route(m.c, &r)
}

func gidOfAddr(a netip.Addr) [16]byte {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return a.As16()
}

func putSA(s *C.struct_tb_cm_sa, ap netip.AddrPort) {
	if !ap.IsValid() {
		return
	}
	a := ap.Addr()
	s.family = C.AF_INET6
	if a.Unmap().Is4() {
		s.family = C.AF_INET
		a = a.Unmap()
	}
	b := gidOfAddr(a)
	for i := range b {
		s.addr[i] = C.uint8_t(b[i])
	}
	s.port = C.uint16_t(ap.Port())
}

// qpInit converts the C QP attributes for rdmacm.ID.CreateQP, with the
// checks and minimums ibv_create_qp applies (qp.go).
func qpInit(a *C.struct_ibv_qp_init_attr_ex, scq, rcq *cqState, ss *srqState) (verbs.QPInitAttr, syscall.Errno) {
	var typ verbs.QPType
	switch a.qp_type {
	case C.IBV_QPT_RC:
		typ = verbs.QPTypeRC
	case C.IBV_QPT_UD:
		typ = verbs.QPTypeUD
	default:
		return verbs.QPInitAttr{}, syscall.EOPNOTSUPP // rdma_cm connects RC and resolves UD
	}
	capv, en := qpCap(&a.cap)
	if en != 0 {
		return verbs.QPInitAttr{}, en
	}
	init := verbs.QPInitAttr{Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: capv, SigAll: a.sq_sig_all != 0}
	if ss != nil {
		init.SRQ = ss.srq
	}
	return init, 0
}

// tbgo_cm_create_qp creates the ID's QP through package rdmacm, which
// moves it (RC to INIT, UD to RTS) and later through the connection's
// states, and wraps it as a C QP.
//
//export tbgo_cm_create_qp
func tbgo_cm_create_qp(h, pdh, scqh, rcqh, srqh C.uintptr_t, a *C.struct_ibv_qp_init_attr_ex, ex C.int, out **C.struct_ibv_qp) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := liveCM(h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	if m.id == nil || m.liveQP() != nil || pdh == 0 || scqh == 0 || (rcqh == 0 && srqh == 0) {
		return C.int(syscall.EINVAL)
	}
	if rcqh == 0 {
		rcqh = scqh
	}
	ps := pdOf(pdh)
	if ps.eng.vctx != m.id.VerbsContext() {
		return C.int(syscall.EINVAL)
	}
	scq, rcq := cqOf(scqh), cqOf(rcqh)
	var ss *srqState
	if srqh != 0 {
		ss = srqOf(srqh)
	}
	init, en := qpInit(a, scq, rcq, ss)
	if en != 0 {
		return C.int(en)
	}
	qp, err := m.id.CreateQP(ps.pd, &init)
	if err != nil {
		return C.int(errno(err))
	}
	qs, en := wrapQP(ps, scq, rcq, ss, qp, a, ex != 0)
	if en != 0 {
		m.id.DestroyQP()
		return C.int(en)
	}
	qs.c.qpx.qp_base.state = C.enum_ibv_qp_state(qp.Query().State)
	m.qs = qs
	*out = &qs.c.qpx.qp_base
	return 0
}

// tbgo_cm_destroy_qp detaches the QP from the ID and closes it; the C
// side then frees the C QP with ibv_destroy_qp.
//
//export tbgo_cm_destroy_qp
func tbgo_cm_destroy_qp(h C.uintptr_t) {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := cmOf(h)
	if m.id != nil {
		m.id.DestroyQP()
	}
	m.qs = nil
}

// liveQP is the C QP rdma_create_qp made for m, unless the program has
// destroyed it since (rping frees it with ibv_destroy_qp, not
// rdma_destroy_qp, before rdma_destroy_id). cmMu is held.
func (m *cmID) liveQP() *qpState {
	if m.qs != nil && qpByGo(m.qs.qp) != m.qs {
		m.qs = nil
	}
	return m.qs
}

// setQPState records a state package rdmacm moved the ID's QP to.
func (m *cmID) setQPState() {
	if qs := m.liveQP(); qs != nil {
		qs.c.qpx.qp_base.state = C.enum_ibv_qp_state(qs.qp.Query().State)
	}
}

func pdataOf(p unsafe.Pointer, n C.uint8_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return C.GoBytes(p, C.int(n))
}

func (m *cmID) devMaxRes() uint8 {
	if m.dev == nil {
		return verbs.MaxRdAtomic
	}
	return uint8(min(m.dev.cs.dev.QueryDevice().MaxQPRdAtom, 255))
}

//export tbgo_cm_connect
func tbgo_cm_connect(h C.uintptr_t, p *C.struct_rdma_conn_param) C.int {
	cmMu.Lock()
	m := cmOf(h)
	g := m.id
	hasQP := m.liveQP() != nil
	maxRes := m.devMaxRes()
	ps := m.ps
	opts := m.opts
	cmMu.Unlock()
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	var cp *rdmacm.ConnParam
	if p != nil {
		cp = &rdmacm.ConnParam{
			PrivateData:        pdataOf(p.private_data, p.private_data_len),
			ResponderResources: uint8(p.responder_resources),
			InitiatorDepth:     uint8(p.initiator_depth),
			FlowControl:        p.flow_control != 0,
			RetryCount:         uint8(p.retry_count),
			RNRRetryCount:      uint8(p.rnr_retry_count),
			SRQ:                p.srq != 0,
			QPNum:              uint32(p.qp_num),
		}
	}
	if ps == rdmacm.PSTCP {
		// librdmacm's checks (ucma_valid_param).
		if cp == nil && !hasQP {
			return C.int(syscall.EINVAL)
		}
		if cp != nil && ((cp.ResponderResources != rdmacm.MaxResources && cp.ResponderResources > maxRes) ||
			(cp.InitiatorDepth != rdmacm.MaxResources && cp.InitiatorDepth > maxRes)) {
			return C.int(syscall.EINVAL)
		}
	}
	// A REJ for want of a listener sends the REQ again for a second
	// before REJECTED (rdmacm.ID.SetNoListenerRetry): perftest -R connects
	// its test QP right after the exchange, before a slower server (a
	// stock rxe host) listens again, and its own retry reuses the IDs it
	// just destroyed. The kernel reports the first REJ.
	g.SetNoListenerRetry(noListenerRetry)
	opts.applyACKTimeout(g)
	return C.int(errno(g.Connect(cp)))
}

// noListenerRetry is how long a connection keeps trying while nothing
// listens at the peer's port (docs/cabi.md).
const noListenerRetry = time.Second

//export tbgo_cm_accept
func tbgo_cm_accept(h C.uintptr_t, p *C.struct_rdma_conn_param) C.int {
	cmMu.Lock()
	m := cmOf(h)
	g := m.id
	hasQP := m.liveQP() != nil
	maxRes := m.devMaxRes()
	offered := m.offered
	ud := m.qpType == C.IBV_QPT_UD
	opts := m.opts
	cmMu.Unlock()
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	var cp *rdmacm.ConnParam
	switch {
	case ud:
		cp = &rdmacm.ConnParam{}
		if p != nil {
			cp.PrivateData = pdataOf(p.private_data, p.private_data_len)
			cp.QPNum = uint32(p.qp_num)
		}
	case p == nil:
		if !hasQP {
			return C.int(syscall.EINVAL)
		}
	default:
		rr, id := uint8(p.responder_resources), uint8(p.initiator_depth)
		if (rr != rdmacm.MaxResources && rr > maxRes) || (id != rdmacm.MaxResources && id > maxRes) {
			return C.int(syscall.EINVAL)
		}
		// RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH: what the peer
		// offered, up to the device's maximum, as librdmacm accepts.
		if rr == rdmacm.MaxResources {
			rr = min(offered.ResponderResources, maxRes)
		}
		if id == rdmacm.MaxResources {
			id = min(offered.InitiatorDepth, maxRes)
		}
		cp = &rdmacm.ConnParam{
			PrivateData:        pdataOf(p.private_data, p.private_data_len),
			ResponderResources: rr,
			InitiatorDepth:     id,
			FlowControl:        p.flow_control != 0,
			RNRRetryCount:      uint8(p.rnr_retry_count),
			SRQ:                p.srq != 0,
			QPNum:              uint32(p.qp_num),
		}
	}
	opts.applyACKTimeout(g)
	err := g.Accept(cp)
	cmMu.Lock()
	m.setQPState()
	cmMu.Unlock()
	return C.int(errno(err))
}

//export tbgo_cm_reject
func tbgo_cm_reject(h C.uintptr_t, pdata unsafe.Pointer, n C.uint8_t) C.int {
	cmMu.Lock()
	g := cmOf(h).id
	cmMu.Unlock()
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	return C.int(errno(g.Reject(pdataOf(pdata, n))))
}

//export tbgo_cm_establish
func tbgo_cm_establish(h C.uintptr_t) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := cmOf(h)
	if m.id == nil {
		return C.int(syscall.EINVAL)
	}
	m.established = true
	if err := m.id.Establish(); err != nil {
		m.established = false
		return C.int(errno(err))
	}
	return 0
}

//export tbgo_cm_disconnect
func tbgo_cm_disconnect(h C.uintptr_t) C.int {
	cmMu.Lock()
	m := cmOf(h)
	g := m.id
	cmMu.Unlock()
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	err := g.Disconnect()
	cmMu.Lock()
	m.setQPState()
	cmMu.Unlock()
	return C.int(errno(err))
}

//export tbgo_cm_migrate
func tbgo_cm_migrate(h, chh C.uintptr_t) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	m := liveCM(h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	var ch *cmChannel
	if chh == 0 {
		var en syscall.Errno
		if ch, en = newChannel(); en != 0 {
			return C.int(en)
		}
		ch.owner = m
	} else {
		ch = chanOf(chh)
	}
	if en := m.migrateLocked(ch); en != 0 {
		if chh == 0 {
			ch.closeChannel(false)
		}
		return C.int(en)
	}
	m.sync = chh == 0
	m.c.sync = C.int(b2i(m.sync))
	return 0
}

// migrateLocked moves m and its queued events to ch. cmMu is held.
func (m *cmID) migrateLocked(ch *cmChannel) syscall.Errno {
	if ch.closed {
		return syscall.EINVAL
	}
	old := m.ch
	if old == ch {
		return 0
	}
	for _, g := range m.goIDs() {
		if err := g.Migrate(ch.gch); err != nil {
			return errno(err)
		}
	}
	var moved []*cmEvent
	if !old.closed {
		moved = old.take(func(e *cmEvent) bool { return e.id == m || e.listen == m })
	}
	wasPrivate := old.owner == m
	m.ch = ch
	m.c.id.channel = &ch.c.ch
	for _, e := range moved {
		ch.enqueue(e)
	}
	if wasPrivate {
		old.closeChannel(false)
	}
	return 0
}

const (
	optLevelID    = 0 // RDMA_OPTION_ID
	optLevelIB    = 1 // RDMA_OPTION_IB
	optTOS        = 0 // RDMA_OPTION_ID_TOS
	optReuseAddr  = 1 // RDMA_OPTION_ID_REUSEADDR
	optAFOnly     = 2 // RDMA_OPTION_ID_AFONLY
	optAckTimeout = 3 // RDMA_OPTION_ID_ACK_TIMEOUT
	optIBPath     = 1 // RDMA_OPTION_IB_PATH
)

// tbgo_cm_set_option stores the options perftest, UCX and libfabric set
// (the kernel's checks on their sizes apply). RDMA_OPTION_IB_PATH (a path
// record from an SA) resolves the route from the device instead, which is
// what it stands for on RoCE.
//
//export tbgo_cm_set_option
func tbgo_cm_set_option(h C.uintptr_t, level, name C.int, val unsafe.Pointer, n C.size_t) C.int {
	cmMu.Lock()
	m := cmOf(h)
	defer cmMu.Unlock()
	switch level {
	case optLevelID:
		switch name {
		case optTOS:
			if val == nil || n < 1 {
				return C.int(syscall.EINVAL)
			}
			m.opts.tos = *(*uint8)(val)
		case optAckTimeout:
			if val == nil || n < 1 {
				return C.int(syscall.EINVAL)
			}
			// The kernel refuses it on a UD ID; the QP's field has 5 bits.
			t := *(*uint8)(val)
			if m.qpType == C.IBV_QPT_UD || t > 31 {
				return C.int(syscall.EINVAL)
			}
			m.opts.ackTimeout, m.opts.ackTimeoutSet = t, true
		case optReuseAddr, optAFOnly:
			if val == nil || n < C.size_t(unsafe.Sizeof(C.int(0))) {
				return C.int(syscall.EINVAL)
			}
			v := *(*C.int)(val) != 0
			if name == optReuseAddr {
				m.opts.reuseAddr = v
			} else {
				m.opts.afOnly = v
			}
		default:
			return C.int(syscall.ENOSYS)
		}
		return 0
	case optLevelIB:
		if name != optIBPath {
			return C.int(syscall.ENOSYS)
		}
		g := m.id
		if g == nil {
			return C.int(syscall.EINVAL)
		}
		cmMu.Unlock()
		err := g.ResolveRoute(2 * time.Second)
		cmMu.Lock()
		return C.int(errno(err))
	}
	return C.int(syscall.ENOSYS)
}

// tbgo_cm_get_devices lists the rdma_cm contexts of every device
// (rdma_get_devices), NULL-terminated, in memory the C side frees.
//
//export tbgo_cm_get_devices
func tbgo_cm_get_devices(num *C.int, errp *C.int) **C.struct_ibv_context {
	cmMu.Lock()
	defer cmMu.Unlock()
	devs, err := cmListDevices()
	if err != nil {
		*errp = C.int(syscall.ENODEV)
		return nil
	}
	var ctxs []*C.struct_ibv_context
	for _, d := range devs {
		if cd, en := cmDevOf(d); en == 0 {
			ctxs = append(ctxs, cd.ctx)
		}
	}
	list := (**C.struct_ibv_context)(C.calloc(C.size_t(len(ctxs)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	if list == nil {
		*errp = C.int(syscall.ENOMEM)
		return nil
	}
	copy(unsafe.Slice(list, len(ctxs)+1), ctxs)
	if num != nil {
		*num = C.int(len(ctxs))
	}
	return list
}

// tbgo_cm_get_event takes the first event of the channel, which the
// caller's read of the eventfd accounted for: EAGAIN when there is none
// (the count belonged to an event since moved or dropped).
//
//export tbgo_cm_get_event
func tbgo_cm_get_event(chh C.uintptr_t, out **C.struct_rdma_cm_event) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	ch := chanOf(chh)
	if ch.closed || len(ch.q) == 0 {
		return C.int(syscall.EAGAIN)
	}
	e := ch.q[0]
	ch.q[0] = nil
	ch.q = ch.q[1:]
	*out = e.toC()
	return 0
}

// toC makes the struct rdma_cm_event of e and applies it to its ID, as
// librdmacm does when it reads an event from the kernel. cmMu is held.
func (e *cmEvent) toC() *C.struct_rdma_cm_event {
	ev := (*C.struct_tb_cm_event)(C.calloc(1, C.sizeof_struct_tb_cm_event))
	m := e.id
	ev.ev.id = &m.c.id
	m.refs++
	if e.listen != nil {
		ev.ev.listen_id = &e.listen.c.id
		e.listen.refs++
	}
	ev.ev.event = C.enum_rdma_cm_event_type(e.typ)
	ev.ev.status = C.int(e.status)
	g := e.goEv
	switch e.typ {
	case rdmacm.EventAddrResolved:
		m.syncRoute(false)
	case rdmacm.EventRouteResolved:
		m.syncRoute(true)
	case rdmacm.EventConnectRequest:
		if cd := cmDevByVctx(m.id.VerbsContext()); cd != nil {
			m.setDevice(cd)
		}
		m.bound = true
		m.syncRoute(true)
		liveIDs[m] = struct{}{}
		if e.listen.sync {
			// A synchronous listener hands out synchronous IDs
			// (rdma_get_request): the new ID gets its own channel.
			if ch, en := newChannel(); en == 0 {
				ch.owner = m
				m.sync = true
				m.c.sync = 1
				if m.migrateLocked(ch) != 0 {
					ch.closeChannel(false)
				}
			}
		}
	case rdmacm.EventEstablished, rdmacm.EventRejected, rdmacm.EventDisconnected, rdmacm.EventConnectError:
		if qs := m.liveQP(); e.typ == rdmacm.EventRejected && qs != nil {
			// librdmacm moves the QP of a rejected connection to ERR.
			qs.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
		}
		m.setQPState()
	}
	if g == nil {
		return &ev.ev
	}
	pd := g.Param.PrivateData
	if len(pd) > C.TB_CM_PDATA {
		pd = pd[:C.TB_CM_PDATA]
	}
	if len(pd) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev.pdata[0])), len(pd)), pd)
	}
	var pdp unsafe.Pointer
	if len(pd) > 0 {
		pdp = unsafe.Pointer(&ev.pdata[0])
	}
	if m.qpType == C.IBV_QPT_UD || g.UD != nil {
		var ud C.struct_tb_cm_ud
		if g.UD != nil {
			for i, b := range g.UD.AH.DGID {
				ud.dgid[i] = C.uint8_t(b)
			}
			ud.hop_limit = C.uint8_t(g.UD.AH.HopLimit)
			ud.tclass = C.uint8_t(g.UD.AH.TrafficClass)
			ud.flow_label = C.uint32_t(g.UD.AH.FlowLabel)
			ud.qp_num = C.uint32_t(g.UD.QPN)
			ud.qkey = C.uint32_t(g.UD.QKey)
			ud.sgid_index = 1
			if m.dev != nil && m.id != nil {
				if i := gidIndexOf(m.dev.cs.current(), verbs.GID(gidOfAddr(m.id.LocalAddr().Addr()))); i >= 0 {
					ud.sgid_index = C.uint8_t(i)
				}
			}
		}
		C.tb_cm_ev_ud(&ev.ev, &ud, pdp, C.uint8_t(len(pd)))
		return &ev.ev
	}
	conn := C.tb_cm_ev_conn(&ev.ev)
	conn.private_data = pdp
	conn.private_data_len = C.uint8_t(len(pd))
	conn.responder_resources = C.uint8_t(g.Param.ResponderResources)
	conn.initiator_depth = C.uint8_t(g.Param.InitiatorDepth)
	conn.flow_control = C.uint8_t(b2i(g.Param.FlowControl))
	conn.retry_count = C.uint8_t(g.Param.RetryCount)
	conn.rnr_retry_count = C.uint8_t(g.Param.RNRRetryCount)
	conn.srq = C.uint8_t(b2i(g.Param.SRQ))
	conn.qp_num = C.uint32_t(g.Param.QPNum)
	return &ev.ev
}

// tbgo_cm_ack_event frees an event and drops the references it held.
//
//export tbgo_cm_ack_event
func tbgo_cm_ack_event(ev *C.struct_rdma_cm_event) {
	cmMu.Lock()
	defer cmMu.Unlock()
	for _, id := range []*C.struct_rdma_cm_id{ev.id, ev.listen_id} {
		if id == nil {
			continue
		}
		c := (*C.struct_tb_cm_id)(unsafe.Pointer(id))
		cmOf(c.h).release()
	}
	C.free(unsafe.Pointer(ev))
}

// tbgo_cm_init_qp_attr fills the attributes and mask that move a QP the
// program made itself to qp_attr.qp_state for the ID's connection
// (rdma_init_qp_attr; rdmacm.ID.InitQPAttr).
//
//export tbgo_cm_init_qp_attr
func tbgo_cm_init_qp_attr(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask *C.int) C.int {
	cmMu.Lock()
	m := cmOf(h)
	g := m.id
	dev := m.dev
	cmMu.Unlock()
	if g == nil || dev == nil {
		return C.int(syscall.EINVAL)
	}
	attr, am, err := g.InitQPAttr(verbs.QPState(a.qp_state))
	if err != nil {
		return C.int(errno(err))
	}
	st := a.qp_state
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = st
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port_num = C.uint8_t(max(attr.PortNum, 1))
	a.qkey = C.uint32_t(attr.QKey)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	if am&verbs.QPAttrAV != 0 {
		a.ah_attr.is_global = 1
		a.ah_attr.port_num = 1
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)), 16), attr.AH.DGID[:])
		a.ah_attr.grh.hop_limit = C.uint8_t(attr.AH.HopLimit)
		a.ah_attr.grh.traffic_class = C.uint8_t(attr.AH.TrafficClass)
		a.ah_attr.grh.flow_label = C.uint32_t(attr.AH.FlowLabel)
		a.ah_attr.grh.sgid_index = 1
		if i := gidIndexOf(dev.cs.current(), verbs.GID(gidOfAddr(g.LocalAddr().Addr()))); i >= 0 {
			a.ah_attr.grh.sgid_index = C.uint8_t(i)
		}
	}
	*mask = C.int(am)
	return 0
}
