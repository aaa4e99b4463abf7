#!/bin/sh
# Two network namespaces joined by a veth pair whose ends are both named
# thunderbolt0 (MTU 65520, 198.18.0.2/24 and 198.18.0.3/24, IPv6
# link-local): discovery's advertiser runs in one, Browse/Resolve/Watch in
# the other. Needs root (ip netns). Run from the discovery directory:
#   sudo sh testdata/netns.sh
# With AVAHI=1 it also starts a private avahi-daemon in the browsing
# namespace and runs avahi-browse -rpt _tbrdma._udp against the advertiser.
set -eu
A=tbrdma-disc-a
B=tbrdma-disc-b
BIN=$(mktemp -d)/discovery.test
cleanup() {
	[ -n "${AVAHI_PID:-}" ] && kill "$AVAHI_PID" 2>/dev/null || true
	if [ -n "${DBUS_PID:-}" ]; then
		kill "$DBUS_PID" 2>/dev/null || true
		rm -f /run/dbus/pid /run/dbus/system_bus_socket
	fi
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
ip -n $A addr add 198.18.0.2/24 dev thunderbolt0
ip -n $B addr add 198.18.0.3/24 dev thunderbolt0
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

if [ "${AVAHI:-}" = 1 ]; then
	echo "== avahi-browse in $B against the advertiser in $A"
	RUN=$(dirname "$BIN")
	mkdir -p /run/dbus
	dbus-daemon --system --fork --print-pid > "$RUN/dbus.pid"
	DBUS_PID=$(cat "$RUN/dbus.pid")
	cat > "$RUN/avahi.conf" <<CONF
[server]
allow-interfaces=thunderbolt0
use-ipv4=yes
use-ipv6=yes
enable-dbus=yes
[publish]
publish-addresses=no
publish-hinfo=no
publish-workstation=no
CONF
	ip netns exec $B avahi-daemon --no-drop-root --no-chroot --no-rlimits -f "$RUN/avahi.conf" > "$RUN/avahi.log" 2>&1 &
	AVAHI_PID=$!
	sleep 2
	TBRDMA_HELPER_ADVERTISE="lab-a" TBRDMA_HELPER_SECONDS=8 \
		ip netns exec $A "$BIN" -test.run '^TestHelperAdvertise$' &
	ADV=$!
	sleep 1.5
	ip netns exec $B avahi-browse -rpt _tbrdma._udp || true
	ip netns exec $B avahi-browse -rt _tbrdma._udp || true
	echo "-- after goodbye:"
	wait $ADV
	sleep 1.5
	ip netns exec $B avahi-browse -pt _tbrdma._udp || true
	echo "-- avahi-daemon log:"
	cat "$RUN/avahi.log"
fi
echo OK
