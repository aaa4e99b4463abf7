// Package sniff writes and reads classic libpcap capture files, so that
// traffic a user-space RoCEv2 endpoint sends and receives on a plain UDP
// socket can be opened in Wireshark or tshark.
//
// A UDP socket never shows the IP and UDP headers, so the writing side
// synthesises them: [AppendUDPFrame] wraps a UDP payload in an IPv4 or IPv6
// header plus a UDP header and produces a LINKTYPE_RAW (101) packet, and a
// [Recorder] writes such packets to a pcap stream. Wireshark decodes UDP
// port 4791 as InfiniBand (RoCEv2) by default.
//
// The reading side, [Reader], accepts classic pcap files in either byte
// order with microsecond or nanosecond timestamps (not pcapng), and
// [DecodeUDP] extracts the IP header, UDP header and UDP payload from an
// Ethernet (with an optional 802.1Q tag), raw IP or Linux cooked (SLL)
// frame. Neither panics on malformed input.
//
// Ownership and concurrency: [Writer] and [Reader] are not safe for
// concurrent use; [Recorder] is. [Writer.WritePacket] and [Recorder.Record]
// do not retain the slices they are given. The data returned by
// [Reader.Next] is valid only until the next call to Next. None of the types
// close the underlying stream; the caller owns it.
package sniff
