// Package transporttest is an in-memory link for tests: a Network of
// endpoints that implement transport.Conn, with seeded, reproducible fault
// injection — loss, burst loss, reordering, duplication, corruption, delay
// and jitter — per network or per direction, and a filter hook for tests
// that drop chosen packets.
//
// Endpoints behave like the UDP endpoint of package transport: WriteBatch
// computes each packet's ICRC in place (with IPv4 identification 0) and
// copies the packet; ReadBatch verifies the ICRC and drops and counts
// (Stats.Drops) packets that fail, so a corrupted packet never reaches the
// reader. Because the sender always uses identification 0, the receiver
// insists on 0 and catches every corruption, where the UDP endpoint would
// accept the one in 2^16 that some other identification explains.
//
// Randomness: each direction (From → To) draws from its own generator,
// seeded from the Network's seed and the two addresses, so what happens to
// the packets of one direction depends only on the seed, the faults and the
// order in which that direction's packets are written.
//
// Time: delays use time.AfterFunc, so under testing/synctest they follow
// the bubble's fake clock. Create the Network inside the bubble. Closing the
// Network stops every pending timer and wakes every reader; no goroutine
// outlives it.
package transporttest
