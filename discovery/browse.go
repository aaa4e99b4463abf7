package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Continuous querying (RFC 6762 §5.2): the first two queries one second
// apart, then doubling intervals, capped here at one minute so that a
// watcher notices new peers reasonably soon.
const (
	firstQueryInterval = time.Second
	maxQueryInterval   = time.Minute
	// followUpGap is the least time between two queries sent to complete
	// a half-known instance.
	followUpGap = 250 * time.Millisecond
)

// querier drives a browser over an endpoint: it sends the queries, feeds
// received datagrams in, and reports events.
type querier struct {
	ep    *endpoint
	b     *browser
	log   *slog.Logger
	extra []string // instance names asked directly (Resolve)
	// oneShot: also send each query as a legacy one-shot query (Browse,
	// Resolve).
	oneShot bool
}

func newQuerier(o *Options, oneShot bool) (*querier, error) {
	log := o.logger()
	ep, err := openEndpoint(o.interfaces(), oneShot, log)
	if err != nil {
		return nil, err
	}
	ifNames := make(map[int]string)
	for _, l := range ep.snapshot() {
		ifNames[l.ifi.Index] = l.ifi.Name
	}
	return &querier{ep: ep, b: newBrowser(ifNames, log), log: log, oneShot: oneShot}, nil
}

// sendQueries sends the query of each link (or of the one link ifIndex,
// when not 0).
func (q *querier) sendQueries(now time.Time, ifIndex int) {
	for _, l := range q.ep.snapshot() {
		if ifIndex != 0 && l.ifi.Index != ifIndex {
			continue
		}
		m := q.b.query(l.ifi.Index, now, q.extra)
		b, err := m.Pack()
		if err != nil {
			q.log.Warn("pack mdns query", "err", err)
			continue
		}
		q.ep.send(l, b, netip.AddrPort{})
		if q.oneShot && len(l.oneShot) > 0 {
			// The same questions as a legacy one-shot query (no known
			// answers, which such queries may not carry): answered at
			// once by unicast even when the responder multicast the
			// records less than a second ago.
			lq := &dns.Msg{MsgHdr: dns.MsgHdr{Id: dns.Id()}, Question: m.Question}
			if b, err := lq.Pack(); err == nil {
				q.ep.sendOneShot(l, b)
			}
		}
	}
}

// run queries and merges answers until ctx ends, calling emit with each
// batch of events; emit returning false stops the run. A link that comes
// up (again) is queried at once and the query interval starts over; the
// peers of a link that goes away leave.
func (q *querier) run(ctx context.Context, emit func([]Event) bool) {
	interval := firstQueryInterval
	now := time.Now()
	q.sendQueries(now, 0)
	nextQuery := now.Add(interval)
	lastQuery := now
	timer := time.NewTimer(time.Until(nextQuery))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-q.ep.events:
			now = time.Now()
			if ev.up {
				q.b.ifNames[ev.ifIndex] = ev.name
				q.sendQueries(now, ev.ifIndex)
				interval = firstQueryInterval
				nextQuery = now.Add(interval)
			} else {
				q.b.dropInterface(ev.ifIndex)
			}
			if evs := q.b.update(now); len(evs) > 0 && !emit(evs) {
				return
			}
		case p := <-q.ep.pkts:
			now = time.Now()
			q.b.handle(p, now)
			if evs := q.b.update(now); len(evs) > 0 && !emit(evs) {
				return
			}
			if now.Sub(lastQuery) >= followUpGap && q.b.incomplete() {
				q.sendQueries(now, 0)
				lastQuery = now
			}
		case <-timer.C:
			now = time.Now()
			if evs := q.b.update(now); len(evs) > 0 && !emit(evs) {
				return
			}
			if !now.Before(nextQuery) || q.b.refreshDue(now) {
				q.sendQueries(now, 0)
				lastQuery = now
				if !now.Before(nextQuery) {
					interval = min(2*interval, maxQueryInterval)
					nextQuery = now.Add(interval)
				}
			}
		}
		wake := nextQuery
		if d := q.b.nextDeadline(); !d.IsZero() && d.Before(wake) {
			wake = d
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(time.Until(wake), time.Millisecond))
	}
}

// Browse queries for tbrdma peers for Options.Timeout (default 1 s, or
// until ctx ends) and returns those seen, sorted by name and interface,
// followed by the static peers of Options (Static, then StaticFile). A
// peer seen on two interfaces appears twice. With static peers and no
// Thunderbolt interface, Browse returns the static peers alone.
func Browse(ctx context.Context, o *Options) ([]Peer, error) {
	static, err := o.staticPeers()
	if err != nil {
		return nil, err
	}
	q, err := newQuerier(o, true)
	if errors.Is(err, ErrNoInterface) && len(static) > 0 {
		return static, nil
	}
	if err != nil {
		return nil, err
	}
	defer q.ep.close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	q.run(ctx, func([]Event) bool { return true })
	return append(q.b.list(), static...), nil
}

// Watch browses continuously until ctx ends, then closes the channel. It
// reports a peer when it becomes complete (Appeared), when its data
// changes (Changed), and when it says goodbye, its records expire or its
// interface goes away (Left). Events are delivered in order; a consumer
// that stops reading stalls the watch (packets queue in the kernel), it
// loses nothing.
//
// Static peers (Options.Static and Options.StaticFile) are reported too,
// as Appeared events first; the file is read again when it changes
// (checked twice a second), and peers added, changed or removed in it are
// reported as Appeared, Changed or Left. A file that cannot be read or
// parsed later is logged and the previous list kept. With static peers and
// no Thunderbolt interface, Watch reports the static peers alone.
func Watch(ctx context.Context, o *Options) (<-chan Event, error) {
	sw, err := newStaticWatch(o)
	if err != nil {
		return nil, err
	}
	q, err := newQuerier(o, false)
	if errors.Is(err, ErrNoInterface) && (len(sw.peers) > 0 || sw.file != "") {
		o.logger().Info("mdns: " + err.Error() + "; watching the static peers only")
		q, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, 16)
	send := func(evs []Event) bool {
		for _, ev := range evs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	initial := sw.initial()
	initialSent := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ok := send(initial)
		close(initialSent)
		if !ok {
			return
		}
		sw.run(ctx, send)
		if q == nil {
			<-ctx.Done() // static peers only: the watch lasts until ctx ends
		}
	})
	if q != nil {
		wg.Go(func() {
			defer q.ep.close()
			<-initialSent // the static peers come first
			q.run(ctx, send)
		})
	}
	go func() {
		wg.Wait()
		close(ch)
	}()
	return ch, nil
}

// Resolve finds the peer called name: a static peer of that name first
// (Options.Static, then StaticFile), then the mDNS instance name
// ("lab-mac", "lab-mac.local", or the full "lab-mac._tbrdma._udp.local"),
// or the peer's host name ("lab-mac-tbrdma" or "lab-mac-tbrdma.local"). It
// returns as soon as the peer is complete (with an IPv4 address, or a
// quarter of a second after it was complete without one, so that the A
// record answered on the IPv4 socket can follow the AAAA record), or an
// error wrapping ErrNotFound after Options.Timeout (default 1 s). Names
// compare case-insensitively.
func Resolve(ctx context.Context, name string, o *Options) (Peer, error) {
	want := trimLocal(name)
	if want == "" {
		return Peer{}, fmt.Errorf("resolve %q: empty name", name)
	}
	static, err := o.staticPeers()
	if err != nil {
		return Peer{}, err
	}
	for _, p := range static {
		if strings.EqualFold(p.Name, want) {
			return p, nil
		}
	}
	q, err := newQuerier(o, true)
	if err != nil {
		return Peer{}, err
	}
	defer q.ep.close()
	q.extra = []string{instanceFQDN(want)}
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var found Peer
	ok := false
	var grace *time.Timer
	q.run(rctx, func(evs []Event) bool {
		for _, ev := range evs {
			if ev.Type == Left || !ev.Peer.matches(want) {
				continue
			}
			found, ok = ev.Peer, true
			if slices.ContainsFunc(found.Addrs, netip.Addr.Is4) {
				return false
			}
			if grace == nil {
				grace = time.AfterFunc(followUpGap, stop)
			}
		}
		return true
	})
	if grace != nil {
		grace.Stop()
	}
	if !ok {
		if err := context.Cause(ctx); err != nil && ctx.Err() != context.DeadlineExceeded {
			return Peer{}, fmt.Errorf("resolve %q: %w", name, err)
		}
		return Peer{}, fmt.Errorf("resolve %q: %w (is tbrdma advertising it on the other machine? Browse lists the peers that answer; Options.Static names a peer without mDNS)", name, ErrNotFound)
	}
	return found, nil
}

// matches reports whether want names the peer (instance or host).
func (p Peer) matches(want string) bool {
	return strings.EqualFold(p.Name, want) || strings.EqualFold(trimLocal(p.Host), want)
}
