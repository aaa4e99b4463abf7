package rdmacm

import (
	"fmt"

	"github.com/tbrdma/tbrdma/rdmacm/internal/cmwire"
	"github.com/tbrdma/tbrdma/transport/wire"
	"github.com/tbrdma/tbrdma/verbs"
)

// repQPInfo is what a REP tells the active side about its QP's RTR and RTS
// attributes.
type repQPInfo struct {
	qpn      wire.QPN
	psn      wire.PSN
	ackDelay cmwire.Timeout
	rnrRetry uint8
	respRes  uint8
}

// InitQPAttr returns the attributes and mask that move a QP the
// application made itself (not CreateQP's) to state for this ID's
// connection (rdma_init_qp_attr): INIT at any time once the ID has a
// device; RTR and RTS on the passive side once the CONNECT_REQUEST came,
// on the active side once the REP did (CONNECT_RESPONSE). They are what
// CreateQP's QP is given at the same points, so a QP moved with them
// matches the PSNs, QPNs and resources the CM exchange announces: pass
// ConnParam.QPNum to Accept or Connect, and call Establish after
// CONNECT_RESPONSE. A UD ID's QP goes INIT (Q_Key UDPQKey), RTR, RTS (SQ
// PSN 0), as CreateQP moves it.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	d := id.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if id.state == stateDestroyed {
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr: %w", ErrClosed)
	}
	a := verbs.QPAttr{State: state}
	if id.ud.on || id.ps == PSUDP {
		switch state {
		case verbs.QPStateInit:
			a.PortNum, a.QKey = 1, UDPQKey
			return a, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey, nil
		case verbs.QPStateRTR:
			return a, verbs.QPAttrState, nil
		case verbs.QPStateRTS:
			return a, verbs.QPAttrState | verbs.QPAttrSQPSN, nil
		}
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr: state %v: %w", state, ErrInvalidArgument)
	}
	passive := id.conn != nil && !id.conn.Active() || id.state == stateConnectRequest
	var respRes, initDepth uint8
	switch {
	case passive:
		respRes, initDepth = min(id.passive.req.InitiatorDepth, verbs.MaxRdAtomic), min(id.passive.req.ResponderResources, verbs.MaxRdAtomic)
		if id.conn != nil && id.state == stateConnect {
			respRes, initDepth = id.param.ResponderResources, id.param.InitiatorDepth
		}
	case id.conn != nil:
		respRes, initDepth = id.param.ResponderResources, id.param.InitiatorDepth
	}
	switch state {
	case verbs.QPStateInit:
		a.PortNum, a.AccessFlags = 1, accessFor(respRes)
		return a, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags, nil
	case verbs.QPStateRTR, verbs.QPStateRTS:
	default:
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr: state %v: %w", state, ErrInvalidArgument)
	}
	if !passive && !id.active.haveREP {
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr: %v before the connection response: %w", state, ErrInvalidState)
	}
	if state == verbs.QPStateRTR {
		a.PathMTU, a.RQPSN, a.MaxDestRdAtomic = id.pathMTU, id.rqPSN, respRes
		a.AH = verbs.AHAttr{DGID: id.peerGID, HopLimit: hopLimit, PortNum: 1}
		a.DestQPN = id.active.rep.qpn
		if passive {
			a.DestQPN = id.passive.req.LocalQPN
		}
		return a, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
			verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer, nil
	}
	if passive {
		a.SQPSN, a.Timeout = id.passive.req.StartingPSN, id.rtsTimeout(uint8(id.passive.req.Primary.LocalACKTimeout))
		a.RetryCnt, a.RNRRetry = id.passive.req.RetryCount, id.passive.req.RNRRetryCount
		a.MaxRdAtomic = min(initDepth, id.passive.req.ResponderResources)
	} else {
		a.SQPSN, a.Timeout = id.active.rep.psn, id.rtsTimeout(uint8(cmwire.AckTimeout(id.active.rep.ackDelay, packetLifetime)))
		a.RetryCnt, a.RNRRetry = min(id.param.RetryCount, 7), id.active.rep.rnrRetry
		a.MaxRdAtomic = min(initDepth, id.active.rep.respRes)
	}
	return a, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
		verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic, nil
}
