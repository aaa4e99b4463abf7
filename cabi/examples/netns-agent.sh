#!/bin/sh
# netns-agent.sh: an ssh stand-in for launchers (Open MPI's plm_rsh_agent)
# when the "hosts" are network namespaces on this machine, as in tbrdma's
# tests. Called as ssh would be, "netns-agent.sh [ssh options] HOST COMMAND...",
# it runs COMMAND with sh in the namespace that holds the address HOST.
#
#   mpirun --mca plm_rsh_agent /path/to/netns-agent.sh --host 198.18.60.1,198.18.60.2 ...
#
# Needs root (ip netns exec). Between real machines use ssh itself.
while [ $# -gt 0 ]; do
	case $1 in
	-[1246AaCfgKkMNnqsTtVvXxYy]*) shift ;;   # ssh's flags without a value
	-[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;       # ... and with one
	-*) shift ;;
	*) break ;;
	esac
done
host=$1
if [ -z "$host" ] || [ $# -lt 2 ]; then
	echo "netns-agent.sh: usage: netns-agent.sh HOST COMMAND..." >&2
	exit 255
fi
shift
for ns in $(ip netns list | awk '{print $1}'); do
	if ip -n "$ns" -o addr show | grep -q " inet $host/"; then
		exec ip netns exec "$ns" /bin/sh -c "$*"
	fi
done
echo "netns-agent.sh: no network namespace holds the address $host (ip netns list; ip -n NS addr)" >&2
exit 255
