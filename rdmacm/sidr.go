package rdmacm

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/tbrdma/tbrdma/internal/hooks"
	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/rdmacm/internal/fsm"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// UD over rdma_cm: service ID resolution (roce-wire.md §7.8). The active
// side sends a SIDR_REQ (request ID = a fresh local comm ID, P_Key 0xFFFF,
// service ID 0x0111<<16 | port, the CMA header and ≤ 180 bytes of user
// data) and resends it every 4.096 s, 15 times; the passive side answers
// once with a SIDR_REP (status, its UD QPN, Q_Key 0x01234567, ≤ 136 bytes).

// sidrRequest is a received SIDR_REQ waiting for Accept or Reject.
type sidrRequest struct {
	requestID cmwire.CommID
	tid       uint64
	serviceID uint64
	key       sidrKey
}

// sidrKey identifies a SIDR_REQ being answered: the requester's address
// and request ID (the kernel's remote_sidr_table uses its port GID and
// request ID).
type sidrKey struct {
	from netip.Addr
	id   cmwire.CommID
}

// sidrReqUserDataSize is the private data a SIDR_REQ carries after the
// CMA header.
const sidrReqUserDataSize = cmwire.SIDRREQPrivateDataSize - cmwire.CMAHeaderSize

func (id *ID) isUD() bool {
	id.d.mu.Lock()
	defer id.d.mu.Unlock()
	return id.ud.on
}

// createUDQP creates a UD QP and moves it to RTS (INIT with Q_Key
// UDPQKey, P_Key index 0, port 1; RTR; RTS with SQ PSN 0), as librdmacm's
// ucma_init_ud_qp does.
func (id *ID) createUDQP(pd *verbs.PD, a *verbs.QPInitAttr) (*verbs.QP, error) {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.qp != nil || id.state == stateDestroyed || id.conn != nil {
		return nil, fmt.Errorf("rdmacm: create qp: %w", ErrInvalidState)
	}
	qp, err := pd.CreateQP(a)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: create qp: %w", err)
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: UDPQKey},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			qp.Close()
			return nil, fmt.Errorf("rdmacm: create qp: UD QP to %v: %w", s.attr.State, err)
		}
	}
	id.qp, id.srq, id.ud.on = qp, a.SRQ != nil, true
	return qp, nil
}

// connectSIDR sends the SIDR_REQ of a UD ID.
func (id *ID) connectSIDR(p *ConnParam) error {
	var pdata []byte
	if p != nil {
		pdata = p.PrivateData
	}
	if len(pdata) > sidrReqUserDataSize {
		return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d on a UD ID: %w", len(pdata), sidrReqUserDataSize, ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateRouteResolved {
		return fmt.Errorf("rdmacm: connect: %w", ErrInvalidState)
	}
	if id.psk.key != nil && len(pdata) > sidrReqUserDataSize-pskTrailerLen {
		return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d on a UD ID with a pre-shared key: %w", len(pdata), sidrReqUserDataSize-pskTrailerLen, ErrInvalidArgument)
	}
	local := d.newCommID()
	f := cmwire.SIDRREQFields{RequestID: local, PKey: wire.PKeyDefault,
		ServiceID: cmwire.ServiceID(cmwire.PortSpace(id.ps), id.remote.Port())}
	hdr := cmwire.NewCMAHeader(id.local.Port(), id.local.Addr(), id.remote.Addr()).Append(f.PrivateData[:0])
	copy(f.PrivateData[len(hdr):], pdata)
	if id.psk.key != nil {
		reservePSK(f.PrivateData[:], false, false)
	}
	tid := cmwire.KernelTID(d.hiTID, local)
	mad := cmwire.AppendMAD(nil, tid, f)
	if id.psk.key != nil {
		id.psk.req = id.psk.key.sign(pskSIDRREQ, nil, mad)
	}
	id.ud.sidr = fsm.NewSIDR(local, tid, fsm.SIDRTiming(cmResponseTimeout, maxCMRetries))
	d.sidrs[local] = id
	id.state = stateConnect
	now := time.Now()
	id.applySIDR(now, id.ud.sidr.Send(now, mad))
	d.wake()
	return nil
}

// applySIDR sends what a SIDR step returned and reports its event.
func (id *ID) applySIDR(now time.Time, r fsm.Result) {
	d := id.d
	for _, m := range r.Send {
		d.send(id.peer, m)
	}
	switch r.Event {
	case fsm.EvSIDRReply:
		id.onSIDRREP(r.Msg.SIDRREP())
	case fsm.EvUnreachable:
		id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: etimedout, Err: &TimeoutError{Op: "service ID resolution"}})
	}
	if id.ud.sidr.Done() && d.sidrs[id.ud.sidr.RequestID] == id {
		delete(d.sidrs, id.ud.sidr.RequestID)
	}
}

// onSIDRREP reports a SIDR_REP as rdma_cm does (cma_sidr_rep_handler):
// status ≠ 0 → UNREACHABLE with that status; a Q_Key other than
// UDPQKey → ADDR_ERROR -EINVAL; otherwise ESTABLISHED with the UD info.
func (id *ID) onSIDRREP(rep cmwire.SIDRREP) {
	pd := append([]byte(nil), rep.PrivateData()...)
	st := SIDRStatus(rep.Status())
	if id.psk.key != nil {
		// Refusals are not authenticated (as REJs are not): an unsigned
		// one is reported as it is. A success must prove the key.
		if _, _, ok := id.psk.key.verify(pskSIDRREP, id.psk.req[:], rep); ok {
			stripPSK(pd)
		} else if st == SIDRSuccess {
			id.d.authFailures++
			id.d.cm.AuthFailures.Add(1)
			id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: int(SIDRReject), Param: ConnParam{PrivateData: pd},
				Err: &SIDRError{Status: SIDRReject, PrivateData: pd, Auth: true, Local: true}})
			return
		}
	}
	if st != SIDRSuccess {
		id.ch.post(&Event{Type: EventUnreachable, ID: id, Status: int(st), Param: ConnParam{PrivateData: pd},
			Err: &SIDRError{Status: st, PrivateData: pd, Auth: st == SIDRReject && bytes.HasPrefix(pd, []byte(authFailedText))}})
		return
	}
	if verbs.QKey(rep.QKey()) != UDPQKey {
		id.ch.post(&Event{Type: EventAddrError, ID: id, Status: einval, Param: ConnParam{PrivateData: pd},
			Err: fmt.Errorf("rdmacm: SIDR_REP with Q_Key %#x, want %#x: %w", uint32(rep.QKey()), uint32(UDPQKey), ErrInvalidArgument)})
		return
	}
	id.ch.post(&Event{Type: EventEstablished, ID: id, Param: ConnParam{PrivateData: pd, QPNum: uint32(rep.QPN())},
		UD: &UDParam{QPN: rep.QPN(), QKey: UDPQKey, AH: id.ahAttr()}})
}

// ahAttr is the address vector to the ID's peer.
func (id *ID) ahAttr() verbs.AHAttr {
	return verbs.AHAttr{DGID: id.peerGID, HopLimit: hopLimit, PortNum: 1}
}

// acceptSIDR answers a SIDR_REQ with status 0, the ID's QPN and UDPQKey.
func (id *ID) acceptSIDR(p *ConnParam) error {
	var pdata []byte
	var qpn wire.QPN
	if p != nil {
		pdata, qpn = p.PrivateData, wire.QPN(p.QPNum)
	}
	if len(pdata) > cmwire.SIDRREPPrivateDataSize {
		return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d on a UD ID: %w", len(pdata), cmwire.SIDRREPPrivateDataSize, ErrInvalidArgument)
	}
	if id.psk.key != nil && len(pdata) > cmwire.SIDRREPPrivateDataSize-pskTrailerLen {
		return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d on a UD ID with a pre-shared key: %w", len(pdata), cmwire.SIDRREPPrivateDataSize-pskTrailerLen, ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateConnectRequest || id.ud.req == nil {
		return fmt.Errorf("rdmacm: accept: %w", ErrInvalidState)
	}
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	if qpn == 0 {
		return fmt.Errorf("rdmacm: accept: no UD QP (CreateQP or ConnParam.QPNum): %w", ErrInvalidState)
	}
	id.replySIDR(cmwire.SIDRSuccess, qpn, UDPQKey, pdata)
	id.state = stateConnect
	return nil
}

// rejectSIDR answers a SIDR_REQ with status SIDRReject.
func (id *ID) rejectSIDR(pdata []byte) error {
	if len(pdata) > cmwire.SIDRREPPrivateDataSize {
		return fmt.Errorf("rdmacm: reject: %d bytes of private data, at most %d on a UD ID: %w", len(pdata), cmwire.SIDRREPPrivateDataSize, ErrInvalidArgument)
	}
	if id.psk.key != nil && len(pdata) > cmwire.SIDRREPPrivateDataSize-pskTrailerLen {
		return fmt.Errorf("rdmacm: reject: %d bytes of private data, at most %d on a UD ID with a pre-shared key: %w", len(pdata), cmwire.SIDRREPPrivateDataSize-pskTrailerLen, ErrInvalidArgument)
	}
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state != stateConnectRequest || id.ud.req == nil {
		return fmt.Errorf("rdmacm: reject: %w", ErrInvalidState)
	}
	id.replySIDR(cmwire.SIDRReject, 0, 0, pdata)
	id.state = stateConnect
	return nil
}

// replySIDR sends the one SIDR_REP of a passive UD ID and forgets the
// request: a later copy of the SIDR_REQ is a new request, as in the
// kernel (cm_send_sidr_rep_locked removes it from remote_sidr_table).
func (id *ID) replySIDR(st cmwire.SIDRStatus, qpn wire.QPN, qkey verbs.QKey, pdata []byte) {
	d, r := id.d, id.ud.req
	f := cmwire.SIDRREPFields{RequestID: r.requestID, Status: st, QPN: qpn, ServiceID: r.serviceID, QKey: wire.QKey(qkey)}
	copy(f.PrivateData[:], pdata)
	if id.psk.key != nil {
		reservePSK(f.PrivateData[:], false, false)
	}
	mad := cmwire.AppendMAD(nil, r.tid, f)
	if id.psk.key != nil {
		id.psk.key.sign(pskSIDRREP, id.psk.req[:], mad)
	}
	d.send(id.peer, mad)
	if d.sidrPending[r.key] == id {
		delete(d.sidrPending, r.key)
	}
	id.ud.req = nil
	id.unpend()
	id.leaveHalfOpen()
}

// destroySIDR is Destroy's part for UD IDs (cm_destroy_id): an
// unanswered SIDR_REQ gets a SIDR_REP with status SIDRReject; an
// outstanding SIDR_REQ of ours is cancelled without a message.
func (id *ID) destroySIDR() {
	if id.ud.req != nil {
		id.replySIDR(cmwire.SIDRReject, 0, 0, nil)
	}
	if id.ud.sidr != nil {
		id.ud.sidr.Cancel()
		if id.d.sidrs[id.ud.sidr.RequestID] == id {
			delete(id.d.sidrs, id.ud.sidr.RequestID)
		}
	}
}

// handleSIDRREQ answers a SIDR_REQ: unknown service ID → SIDR_REP status
// 1; a listener of the wrong kind, a bad CMA header or a full backlog →
// status 2; otherwise a CONNECT_REQUEST with a new UD ID. Copies of a
// request still waiting for Accept/Reject are dropped.
func (d *dispatcher) handleSIDRREQ(p *hooks.MADPacket, msg cmwire.Message) {
	req := msg.SIDRREQ()
	key := sidrKey{p.From.Addr(), req.RequestID()}
	if d.sidrPending[key] != nil {
		d.duplicates++
		return
	}
	replyPD := func(st cmwire.SIDRStatus, pd []byte) {
		f := cmwire.SIDRREPFields{RequestID: req.RequestID(), Status: st, ServiceID: req.ServiceID()}
		copy(f.PrivateData[:], pd)
		d.send(p.From.Addr(), cmwire.AppendMAD(nil, msg.TransactionID(), f))
	}
	reply := func(st cmwire.SIDRStatus) { replyPD(st, nil) }
	ps, port, ok := cmwire.SplitServiceID(req.ServiceID())
	ln := d.listeners[portKey{PortSpace(ps), port}]
	if !ok || ln == nil {
		reply(cmwire.SIDRUnsupported)
		return
	}
	if ln.ps != PSUDP && ln.ps != PSIB {
		// A TCP listener: cma_check_req_qp_type fails, the new ID is
		// destroyed in SIDR_REQ_RCVD → status REJECT.
		reply(cmwire.SIDRReject)
		return
	}
	peer := p.From.Addr().Unmap()
	if !ln.halfOpenRoom(peer) {
		d.limitRejects++
		d.cm.RejectsLimit.Add(1)
		replyPD(cmwire.SIDRReject, []byte(limitRejectText))
		return
	}
	// The pre-shared key (psk.go). SIDR keeps no connection, so there is
	// no replay cache: a copy only makes another SIDR_REP, whose MAC
	// binds the copy's nonce.
	var reqMAC [pskMACLen]byte
	if ln.psk.key != nil {
		var valid bool
		if reqMAC, _, valid = ln.psk.key.verify(pskSIDRREQ, nil, req); !valid {
			d.authFailures++
			d.cm.AuthFailures.Add(1)
			replyPD(cmwire.SIDRReject, authRejectData(""))
			return
		}
	}
	hdr, ok := ln.admit(req.ServiceID(), req.PrivateData())
	if !ok {
		reply(cmwire.SIDRReject)
		return
	}
	child := &ID{ch: ln.ch, ps: ln.ps, vctx: d.vctx, d: d, state: stateConnectRequest}
	child.ud.on, child.psk.key, child.psk.req = true, ln.psk.key, reqMAC
	child.peer = p.From.Addr().Unmap()
	child.peerGID = wire.GIDFromAddr(child.peer)
	child.pathMTU = min(verbs.MTU4096, d.vctx.ActiveMTU())
	child.setRequestAddrs(hdr, port)
	child.ud.req = &sidrRequest{requestID: req.RequestID(), tid: msg.TransactionID(), serviceID: req.ServiceID(), key: key}
	d.sidrPending[key] = child
	d.ids[child] = struct{}{}
	d.addRef()
	ln.listen.pending++
	child.passive.pendingOn = ln
	ln.enterHalfOpen(child, peer)
	ud := make([]byte, sidrReqUserDataSize)
	if hdr != nil {
		copy(ud, req.UserData())
	} else {
		ud = append(ud[:0], req.PrivateData()...)
	}
	if ln.psk.key != nil {
		stripPSK(ud)
	}
	ln.ch.post(&Event{Type: EventConnectRequest, ID: child, Listen: ln, Param: ConnParam{PrivateData: ud},
		UD: &UDParam{QKey: UDPQKey, AH: child.ahAttr()}})
}

// handleSIDRREP hands a SIDR_REP to the resolution with its request ID.
func (d *dispatcher) handleSIDRREP(now time.Time, msg cmwire.Message) {
	id := d.sidrs[msg.SIDRREP().RequestID()]
	if id == nil {
		d.unmatched++
		return
	}
	id.applySIDR(now, id.ud.sidr.Handle(now, msg))
}
