// Package discovery finds tbrdma peers on a Thunderbolt link with mDNS /
// DNS-SD (RFC 6762, RFC 6763), so that two machines joined by a cable see
// each other within a second, and Avahi (Linux) or Bonjour (macOS) see
// them too.
//
// Each endpoint is published as an instance of the service type
// [ServiceType] ("_tbrdma._udp") in "local.": a PTR, an SRV whose port is
// the RoCEv2 UDP port, a TXT record (txtvers=1 first, then gid, guid,
// mtu, dev, caps, ver, oob, cm; see [Service]) and A/AAAA records for a host
// name of its own, "<host>-tbrdma.local", that never collides with the
// name the system responder publishes. Records carry the TTLs of RFC 6762
// §10 ([HostTTL] for A, AAAA, SRV; [OtherTTL] for PTR, TXT) and the
// cache-flush bit on unique records.
//
// # Object model and lifetime
//
//   - [Advertise] probes for its names (renaming "name (2)" on a conflict;
//     a simultaneous probe for the same name is settled by the tie-break
//     of RFC 6762 §8.2), announces three times one second apart, then
//     answers queries by multicast (by unicast for QU questions whose
//     records it multicast recently) until [Advertiser.Close], which sends
//     goodbyes (TTL 0) so that browsers drop the peer within a second.
//     [Advertiser.Update] republishes changed data. Close is idempotent;
//     an Advertiser that is not closed keeps its sockets and goroutines.
//   - [Browse] queries for Options.Timeout and returns the [Peer] values
//     seen; [Watch] keeps querying (1 s, 2 s, 4 s … capped at a minute,
//     plus refreshes at 80 % and 90 % of each record's TTL) and reports
//     [Event]s until its context ends; [Resolve] returns one named peer as
//     soon as it is complete. Browse and Resolve also send their queries
//     as legacy one-shot queries, which responders answer at once by
//     unicast.
//   - Static peers ([ParseStaticPeer], [StaticPeers], [ReadStaticPeers],
//     [Options].StaticFile) stand in for mDNS on networks without
//     multicast; Browse and Resolve return them, Watch reports them as
//     events and follows changes to the file.
//
// Advertisers and watchers follow their interfaces (every 500 ms): a link
// that goes down or disappears is closed and its peers leave; one that
// comes back, or a Thunderbolt interface that appears, is used again (the
// advertiser announces there, the watcher queries at once); an address
// change makes the advertiser send goodbyes for the addresses that went
// and announce the new ones.
//
// Peers are values; nothing handed out is changed afterwards. All
// functions and Advertiser methods are safe for concurrent use.
//
// # Interfaces
//
// Everything runs only on the interfaces in [Options].Interfaces, by
// default the Thunderbolt interfaces that are up (as transport/netif
// detects them: thunderbolt-net on Linux, the Thunderbolt ports and
// Thunderbolt Bridge on macOS). With none, calls fail with
// [ErrNoInterface], whose text says what to do. Each interface gets its own
// sockets on port 5353 for IPv4 (224.0.0.251) and IPv6 (ff02::fb), joined
// to the group on that interface only and sharing the port with
// avahi-daemon or mDNSResponder (SO_REUSEADDR, SO_REUSEPORT). On Linux the
// sockets bind the group address rather than the wildcard, so unicast
// datagrams for the system responder never reach them. Answers contain only
// the addresses of the interface they are sent on (RFC 6762 §6.2); IPv6
// link-local addresses of peers carry the interface as their zone.
//
// # What comes from where
//
// hashicorp/mdns (its MDNSService) builds the service records for a
// question; this package adds what that library lacks (per-interface
// sockets, multicast answers, probing, announcements, goodbyes, TTLs,
// cache-flush, known-answer suppression, a querier that merges every
// record of every answer) on github.com/miekg/dns. Neither library's types
// appear in this package's API.
//
// Malformed packets are dropped and logged at debug level on
// [Options].Logger; they never cause a panic (FuzzMessage).
package discovery
