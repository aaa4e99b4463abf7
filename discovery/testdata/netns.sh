#!/bin/sh
# Two network namespaces joined by a veth pair whose ends are both named
# thunderbolt0 (MTU 65520, 198.18.5.1/30 and 198.18.5.2/30, IPv6
# link-local): discovery's advertiser runs in one, Browse/Resolve/Watch in
# the other. Needs root (ip netns). Run from the discovery directory:
#   sudo sh testdata/netns.sh
# The Avahi interoperability checks that this script once ran by hand
# (AVAHI=1) are Go tests now: go test -run 'Avahi|HotPlug|OnlyThunderbolt' ./discovery/
# as root (see docs/discovery.md).
set -eu
A=tbrdma-disc-sh-a
B=tbrdma-disc-sh-b
BIN=$(mktemp -d)/discovery.test
cleanup() {
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
	rm -rf "$(dirname "$BIN")"
}
trap cleanup EXIT
go test -c -o "$BIN" .
ip netns add $A
ip netns add $B
ip link add tbrdma-va type veth peer name tbrdma-vb
ip link set tbrdma-va netns $A
ip link set tbrdma-vb netns $B
for ns in $A $B; do
	ip -n $ns link set lo up
done
ip -n $A link set tbrdma-va name thunderbolt0
ip -n $B link set tbrdma-vb name thunderbolt0
ip -n $A link set thunderbolt0 mtu 65520 up
ip -n $B link set thunderbolt0 mtu 65520 up
ip -n $A addr add 198.18.5.1/30 dev thunderbolt0
ip -n $B addr add 198.18.5.2/30 dev thunderbolt0
sleep 2 # IPv6 DAD for the link-local addresses

echo "== advertiser in $A, browser in $B"
TBRDMA_HELPER_ADVERTISE="lab-a,lab-a second" TBRDMA_HELPER_SECONDS=4 \
	ip netns exec $A "$BIN" -test.run '^TestHelperAdvertise$' -test.v &
ADV=$!
sleep 1.2
TBRDMA_REMOTE_PEER="lab-a,lab-a second" TBRDMA_REMOTE_WAIT_LEAVE=1 \
	ip netns exec $B "$BIN" -test.run '^TestRemotePeer$' -test.v
wait $ADV

echo "== end-to-end suite on thunderbolt0 inside $A"
TBRDMA_TEST_IFACE=thunderbolt0 ip netns exec $A "$BIN" -test.run 'TestEndToEnd|TestTwoInstancesOneHost|TestConflictRename' -test.v

echo OK
