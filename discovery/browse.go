package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
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
}

func newQuerier(o *Options) (*querier, error) {
	log := o.logger()
	names, err := o.interfaces()
	if err != nil {
		return nil, err
	}
	ep, err := openEndpoint(names, log)
	if err != nil {
		return nil, err
	}
	ifNames := make(map[int]string)
	for _, l := range ep.links {
		ifNames[l.ifi.Index] = l.ifi.Name
	}
	return &querier{ep: ep, b: newBrowser(ifNames, log), log: log}, nil
}

func (q *querier) sendQueries(now time.Time) {
	for _, l := range q.ep.links {
		m := q.b.query(l.ifi.Index, now, q.extra)
		b, err := m.Pack()
		if err != nil {
			q.log.Warn("pack mdns query", "err", err)
			continue
		}
		q.ep.send(l, b, netipAny)
	}
}

// run queries and merges answers until ctx ends, calling emit with each
// batch of events; emit returning false stops the run.
func (q *querier) run(ctx context.Context, emit func([]Event) bool) {
	interval := firstQueryInterval
	now := time.Now()
	q.sendQueries(now)
	nextQuery := now.Add(interval)
	lastQuery := now
	timer := time.NewTimer(time.Until(nextQuery))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-q.ep.pkts:
			now = time.Now()
			q.b.handle(p, now)
			if evs := q.b.update(now); len(evs) > 0 && !emit(evs) {
				return
			}
			if now.Sub(lastQuery) >= followUpGap && q.b.incomplete() {
				q.sendQueries(now)
				lastQuery = now
			}
		case <-timer.C:
			now = time.Now()
			if evs := q.b.update(now); len(evs) > 0 && !emit(evs) {
				return
			}
			if !now.Before(nextQuery) || q.b.refreshDue(now) {
				q.sendQueries(now)
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
// followed by the static peers of Options. A peer seen on two interfaces
// appears twice. With static peers and no Thunderbolt interface, Browse
// returns the static peers alone.
func Browse(ctx context.Context, o *Options) ([]Peer, error) {
	q, err := newQuerier(o)
	if errors.Is(err, ErrNoInterface) && o != nil && len(o.Static) > 0 {
		return slices.Clone(o.Static), nil
	}
	if err != nil {
		return nil, err
	}
	defer q.ep.close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	q.run(ctx, func([]Event) bool { return true })
	peers := q.b.list()
	if o != nil {
		peers = append(peers, o.Static...)
	}
	return peers, nil
}

// Watch browses continuously until ctx ends, then closes the channel. It
// reports a peer when it becomes complete (Appeared), when its data
// changes (Changed), and when it says goodbye or its records expire
// (Left). Events are delivered in order; a consumer that stops reading
// stalls the watch (packets queue in the kernel), it loses nothing.
func Watch(ctx context.Context, o *Options) (<-chan Event, error) {
	q, err := newQuerier(o)
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, 16)
	go func() {
		defer close(ch)
		defer q.ep.close()
		q.run(ctx, func(evs []Event) bool {
			for _, ev := range evs {
				select {
				case ch <- ev:
				case <-ctx.Done():
					return false
				}
			}
			return true
		})
	}()
	return ch, nil
}

// Resolve finds the peer called name: a static peer of that name first,
// then the mDNS instance name ("lab-mac", "lab-mac.local", or the full
// "lab-mac._tbrdma._udp.local"), or the peer's host name ("lab-mac-tbrdma"
// or "lab-mac-tbrdma.local"). It returns as soon as the peer is complete,
// or an error wrapping ErrNotFound after Options.Timeout (default 1 s).
// Names compare case-insensitively.
func Resolve(ctx context.Context, name string, o *Options) (Peer, error) {
	want := trimLocal(name)
	if want == "" {
		return Peer{}, fmt.Errorf("resolve %q: empty name", name)
	}
	if o != nil {
		for _, p := range o.Static {
			if strings.EqualFold(p.Name, want) {
				return p, nil
			}
		}
	}
	q, err := newQuerier(o)
	if err != nil {
		return Peer{}, err
	}
	defer q.ep.close()
	q.extra = []string{instanceFQDN(want)}
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	var found Peer
	ok := false
	q.run(ctx, func(evs []Event) bool {
		for _, ev := range evs {
			if ev.Type != Left && ev.Peer.matches(want) {
				found, ok = ev.Peer, true
				return false
			}
		}
		return true
	})
	if !ok {
		if err := context.Cause(ctx); err != nil && ctx.Err() != context.DeadlineExceeded {
			return Peer{}, fmt.Errorf("resolve %q: %w", name, err)
		}
		return Peer{}, fmt.Errorf("resolve %q: %w", name, ErrNotFound)
	}
	return found, nil
}

// matches reports whether want names the peer (instance or host).
func (p Peer) matches(want string) bool {
	return strings.EqualFold(p.Name, want) || strings.EqualFold(trimLocal(p.Host), want)
}
