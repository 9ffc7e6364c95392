#!/bin/sh
# Routing for oi's [transparent] rules, run once as root on the host oi runs
# on (at boot, before oi serves). A transparent rule connects to the backend
# from the client's address, so the backend answers the client: its route to
# the client must lead through this host, and this host must hand those
# replies to oi instead of forwarding them. Three pieces do that:
#
# - nftables marks every TCP or UDP packet that belongs to a local socket
#   with IP_TRANSPARENT set (oi's backend sockets of transparent rules);
# - marked packets are looked up in routing table TABLE;
# - table TABLE says every address is local, so they are delivered to that
#   socket rather than forwarded.
#
# Packets of other sockets, and forwarded traffic, are not marked and route
# as before. MARK and TABLE may be changed if the host already uses 1 or 100.
# tests/integration/transparent.rs runs this file in the namespace oi runs in.
set -eu
MARK="${OI_TRANSPARENT_MARK:-1}"
TABLE="${OI_TRANSPARENT_TABLE:-100}"

ip rule add fwmark "$MARK" lookup "$TABLE"
ip route add local 0.0.0.0/0 dev lo table "$TABLE"
ip -6 rule add fwmark "$MARK" lookup "$TABLE"
ip -6 route add local ::/0 dev lo table "$TABLE"

nft -f - <<NFT
table inet oi_transparent {
  chain prerouting {
    type filter hook prerouting priority mangle; policy accept;
    meta l4proto { tcp, udp } socket transparent 1 meta mark set $MARK accept
  }
}
NFT
