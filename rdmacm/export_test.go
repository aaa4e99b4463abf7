package rdmacm

import "github.com/tbrdma/tbrdma/verbs"

// DispatcherState is the size of the tables of a context's dispatcher.
type DispatcherState struct {
	IDs, Conns, Remote, RemoteQP, Timewait, SIDRs, SIDRPending, Ports, Listeners int
	Stale, Duplicates                                                            uint64
	// Security (psk.go, limits.go).
	AuthFailures, Replays, LimitRejects, HalfOpenExpired uint64
	ReplayCache                                          int
}

// StateOf returns the dispatcher state of vctx; ok is false when no ID
// uses the context.
func StateOf(vctx *verbs.Context) (s DispatcherState, ok bool) {
	registryMu.Lock()
	d := registry[vctx]
	registryMu.Unlock()
	if d == nil {
		return s, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return DispatcherState{IDs: len(d.ids), Conns: len(d.conns), Remote: len(d.remote), RemoteQP: len(d.remoteQP),
		Timewait: len(d.timewait), SIDRs: len(d.sidrs), SIDRPending: len(d.sidrPending), Ports: len(d.ports),
		Listeners: len(d.listeners), Stale: d.stale, Duplicates: d.duplicates,
		AuthFailures: d.authFailures, Replays: d.replays, LimitRejects: d.limitRejects, HalfOpenExpired: d.halfOpenExpired,
		ReplayCache: d.replay.len()}, true
}
