# Sourced by scripts/slurm_local.sh: the link between the nodes of a cluster started with
# `--link RATE` (see that script's header). Uses its STATE, NODES, LINK, SUBNET and its die / say /
# node_names; defines net_id, netns_of, veth_of, bridge_name, link_rate, link_words, pick_subnet,
# tbf_args, make_link and remove_link.
# shellcheck shell=bash

# Names carry an id from the state dir, so two clusters (tests/test_cluster_nodes.py) never share one.
net_id() { printf '%s' "$STATE" | sha1sum | cut -c1-4; }
netns_of() { echo "dlt$(net_id)-$1"; }          # the node's network namespace (ip netns)
veth_of() { echo "dlt$(net_id)$1"; }            # the machine's end of the node's veth pair
bridge_name() { echo "dlt$(net_id)br"; }
link_rate() { cut -d' ' -f1 "$STATE/link" 2>/dev/null || true; }
link_words() { if [ -n "$1" ]; then echo "--link $1"; else echo "no --link (loopback addresses)"; fi; }

pick_subnet() {  # SUBNET=10.a.b: a /24 no interface of this machine uses, derived from the id
  local id used i a b
  id=$(net_id); used=$(ip -o -4 addr show | awk '{ print $4 }')
  for i in 0 1 2 3 4 5 6 7; do
    a=$(( (0x${id:0:2} + i) % 200 + 30 )); b=$(( 0x${id:2:2} ))
    grep -q "^10\.$a\.$b\." <<<"$used" || { SUBNET=10.$a.$b; return; }
  done
  die "no free 10.x.y.0/24 for the nodes' link (every candidate is in use on this machine)"
}

tbf_args() {  # tc tbf arguments for the rate: a burst of 10 ms at that rate (at least 64 KiB)
  local bits
  bits=$(awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : 1; printf "%d", n * m }')
  echo "rate $1 burst $(( bits / 800 > 65536 ? bits / 800 : 65536 )) latency 200ms"
}

make_link() {  # the bridge, then per node: namespace, veth pair (eth0 inside), address, cap
  local br name addr port ns veth
  br=$(bridge_name)
  echo "$LINK $SUBNET" > "$STATE/link"   # first: a start that dies half-way is cleaned by `stop`
  ip link add "$br" type bridge || die "could not create the bridge $br (needs root and CAP_NET_ADMIN)"
  ip addr add "$SUBNET.1/24" dev "$br" && ip link set "$br" up
  while read -r name addr port; do
    ns=$(netns_of "$name"); veth=$(veth_of "$name")
    ip netns add "$ns" || die "could not create the network namespace $ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$br" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
    if [ "$LINK" != unlimited ]; then   # both directions: into the node (our end), out of it (eth0)
      tc qdisc add dev "$veth" root tbf $(tbf_args "$LINK") \
        || die "tc refused the rate '$LINK'; \`$0 stop\` removes what was made"
      tc -n "$ns" qdisc add dev eth0 root tbf $(tbf_args "$LINK")
    fi
  done < "$STATE/nodes"
  say "link: node1..node$NODES in network namespaces on bridge $br ($SUBNET.0/24), each node's link $LINK"
}

remove_link() {  # namespaces (their eth0 and so the veth pairs go with them), then the bridge
  local name
  [ -f "$STATE/link" ] || return 0
  for name in $(node_names); do
    ip netns del "$(netns_of "$name")" 2>/dev/null || true
    ip link del "$(veth_of "$name")" 2>/dev/null || true
  done
  ip link del "$(bridge_name)" 2>/dev/null || true
  rm -f "$STATE/link"
  say "link removed (namespaces, veths, bridge)"
}

