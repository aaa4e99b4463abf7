package rdmacm

import (
	"context"
	"fmt"
	"sync"
)

// ChannelOptions configure an EventChannel.
type ChannelOptions struct {
	// Resolver resolves host names given to ResolveAddr; nil means IP
	// literals only.
	Resolver Resolver
	// PSK is the pre-shared key (at least MinPSKLen bytes) that
	// authenticates the RC connections of the IDs created on the channel
	// (psk.go, docs/wire-format.md); nil: the device's (SetDevicePSK), if
	// any. Both ends must use the same key: a peer without it is refused.
	PSK []byte
}

// EventChannel delivers the events of its IDs, in order (struct
// rdma_event_channel). Its methods are safe for concurrent use.
type EventChannel struct {
	resolver Resolver
	psk      *pskKey

	mu     sync.Mutex
	queue  []*Event
	closed bool
	ready  chan struct{} // one token while queue is non-empty or closed
}

// CreateEventChannel returns a new event channel. opts may be nil.
func CreateEventChannel(opts *ChannelOptions) (*EventChannel, error) {
	ch := &EventChannel{ready: make(chan struct{}, 1)}
	if opts != nil {
		ch.resolver = opts.Resolver
		k, err := newPSK(opts.PSK)
		if err != nil {
			return nil, fmt.Errorf("rdmacm: create event channel: %w", err)
		}
		ch.psk = k
	}
	return ch, nil
}

func (ch *EventChannel) post(ev *Event) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return
	}
	ch.queue = append(ch.queue, ev)
	select {
	case ch.ready <- struct{}{}:
	default:
	}
}

// GetEvent waits for the next event (rdma_get_cm_event). It returns
// ErrClosed once the channel is destroyed, or ctx's error.
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return nil, ErrClosed
		}
		if len(ch.queue) > 0 {
			ev := ch.queue[0]
			ch.queue[0] = nil
			ch.queue = ch.queue[1:]
			if len(ch.queue) > 0 {
				select {
				case ch.ready <- struct{}{}:
				default:
				}
			}
			ch.mu.Unlock()
			return ev, nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Destroy closes the channel: pending and later GetEvent calls return
// ErrClosed. Destroy the channel's IDs first. Destroy is idempotent.
func (ch *EventChannel) Destroy() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.closed {
		ch.closed = true
		ch.queue = nil
		select {
		case ch.ready <- struct{}{}:
		default:
		}
	}
	return nil
}

// Close is Destroy.
func (ch *EventChannel) Close() error { return ch.Destroy() }
