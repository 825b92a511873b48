# Shared by the network-namespace test scripts (sourced): test/netns/
# run_netns_tests.sh and test/smr/run_smr_netns.sh. The sourcing script
# keeps CREATED_NS, an array of the namespaces to delete at exit.

# Every ip command with a bound: a wedged netlink call must not hang a test.
T() { timeout 10 "$@"; }

# new_ns NAME: a namespace with loopback up and IPv6 off (router
# solicitations and the like would only add noise); remembered in
# CREATED_NS for the cleanup.
new_ns() {
  T ip netns add "$1" || return 1
  CREATED_NS+=("$1")
  T ip -n "$1" link set lo up
  T ip netns exec "$1" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6;
    echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6' 2>/dev/null
  return 0
}
