#!/usr/bin/env bash
# A real Slurm on this host, one node or several, for the test suite and for trying the Slurm cells.
#
#   bash scripts/slurm_local.sh start    # munged (if needed) + slurmctld + slurmd; waits for "idle"
#   bash scripts/slurm_local.sh start --nodes 2   # two compute nodes, node1 and node2 (see below)
#   bash scripts/slurm_local.sh start --nodes 2 --link 100mbit   # ... each in a network namespace of
#                                        # its own, its link to the others capped at 100 Mbit/s
#   bash scripts/slurm_local.sh status   # exit 0 when our cluster answers, 3 when it is not running
#   bash scripts/slurm_local.sh stop     # cancels our jobs, stops only the daemons this script started
#   bash scripts/slurm_local.sh env      # prints `export SLURM_CONF=...` (eval it in your shell)
#   bash scripts/slurm_local.sh kill-node node2     # a node dies: every process on it is killed
#   bash scripts/slurm_local.sh revive-node node2   # ... and boots again (slurmd, sshd), back in service
#
# Several nodes on one machine (--nodes N, N >= 2): node<i> is a slurmd in a UTS namespace of its own
# (its host name) and a mount namespace of its own, with its own loopback address 127.0.0.<i+1>. In
# that mount namespace the cluster's hosts file ($STATE/hosts: node<i> -> its address) is /etc/hosts
# and the cluster's ssh client configuration is /etc/ssh/ssh_config, so on the nodes, as on a real
# cluster, `ssh node2` works with no options: an sshd of the cluster's own listens on each node's
# address, with keys made at start under $STATE/ssh. Everything a job or an ssh session starts on a
# node lives in that node's namespaces (`hostname` prints node2 there). Nothing leaves the machine:
# the addresses are loopback ones; the machine's own /etc/hosts and ssh files are never written.
# `stop` kills whatever is left in the nodes' namespaces, so nothing of a node survives it.
#
# --link RATE (with --nodes N >= 2): an inter-node link slower than the intra-node one. Each node then
# also has a network namespace of its own, joined to the others by a veth pair to a bridge this
# script makes in the machine's namespace (10.<a>.<b>.1/24 on the bridge, the node's address on its
# veth; no route out, nothing forwarded). Inside a node, ranks talk over the node's own loopback
# (full speed); between nodes every byte crosses the two veths, each direction capped at RATE by
# `tc tbf` (tc's rate syntax: 100mbit, 1gbit; `unlimited` for namespaces without a cap). This
# kernel has no `netem`, so the link is slower in bandwidth only: no delay is added. `stop` deletes
# the namespaces, the veths and the bridge.
#
# Runs as root (the daemons run as root, SlurmUser=root). Needs Debian's slurm-wlm and munge:
# `bash scripts/setup.sh --test` installs them. No systemd: daemons are started directly and tracked
# by pid files under $DLTUTOR_SLURM_DIR (default /tmp/dltutor-slurm).
#
# The system's /etc/slurm/slurm.conf is never written: the generated file lives in the state dir and
# every Slurm command (sbatch, srun, squeue, scontrol, sinfo, scancel) and both daemons find it through
# SLURM_CONF. Jobs inherit SLURM_CONF too, so `srun` inside a batch script talks to this cluster.
# Container notes: no cgroups -> proctrack/linuxproc + task/none; no systemd -> munged started here
# as the munge user; ports 6817/6818 are used when free, otherwise another free pair is chosen.
set -euo pipefail

STATE=${DLTUTOR_SLURM_DIR:-/tmp/dltutor-slurm}
CONF=$STATE/slurm.conf
HOST=$(hostname -s)
NODES=""   # --nodes N; 1 when not given
LINK=""    # --link RATE: the nodes in network namespaces, their link capped at RATE (see above)
TIMEOUT=${DLTUTOR_SLURM_TIMEOUT:-60}
export SLURM_CONF=$CONF

die() { echo "slurm_local: ERROR: $*" >&2; exit 1; }
say() { echo "slurm_local: $*"; }

alive() {  # alive <pidfile> <name>: the pid in the file runs and is that program
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && grep -q "$2" "/proc/$pid/comm" 2>/dev/null
}

answers() { timeout 10 sinfo -h -o %T >/dev/null 2>&1; }

# gone <pid>: exited. A daemon's parent is the machine's init, which may reap it only seconds
# later: until then it is a zombie (state Z), dead but still in /proc.
gone() { [ ! -d "/proc/$1" ] || [ "$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

# $STATE/nodes, written at start: one line per compute node, "name address slurmd-port".
node_names() { [ -f "$STATE/nodes" ] && cut -d' ' -f1 "$STATE/nodes"; }
node_field() { awk -v n="$1" -v f="$2" '$1 == n { print $f }' "$STATE/nodes"; }
multi() { [ -f "$STATE/nodes" ] && [ "$(wc -l < "$STATE/nodes")" -gt 1 ]; }
slurmd_pidfile() { if multi; then echo "$STATE/slurmd-$1.pid"; else echo "$STATE/slurmd.pid"; fi; }

running() {
  alive "$STATE/slurmctld.pid" slurmctld && [ -f "$STATE/nodes" ] || return 1
  local n
  for n in $(node_names); do alive "$(slurmd_pidfile "$n")" slurmd || return 1; done
  answers
}

port_free() {  # port_free <port> [address]: nothing listens on the TCP port and we may bind it
  python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[2], int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1" "${2:-0.0.0.0}" 2>/dev/null
}

ports_free() { local i; for i in $(seq 0 $(($2 - 1))); do port_free $(($1 + i)) || return 1; done; }

pick_ports() {  # Slurm's defaults when free, else the first free run: slurmctld, then a slurmd per node
  local p
  for p in 6817 16817 26817 36817 46817; do
    if ports_free "$p" $((NODES + 1)); then CTLD_PORT=$p; SLURMD_PORT=$((p + 1)); return; fi
  done
  die "no $((NODES + 1)) free ports in a row for slurmctld/slurmd (tried 6817 and neighbours)"
}

need_tools() {
  local t missing=()
  for t in munged munge unmunge slurmctld slurmd sinfo sbatch srun squeue scontrol scancel; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  if [ "${NODES:-1}" -gt 1 ]; then
    for t in unshare nsenter sshd ssh ssh-keygen; do command -v "$t" >/dev/null || missing+=("$t"); done
  fi
  if [ -n "$LINK" ]; then
    for t in ip tc; do command -v "$t" >/dev/null || missing+=("$t"); done
  fi
  [ "${#missing[@]}" -eq 0 ] || die "missing ${missing[*]}: run \`bash scripts/setup.sh --test\` (installs slurm-wlm, munge and openssh-server)"
  [ "$(id -u)" -eq 0 ] || die "start the test cluster as root (the daemons run as root)"
}
start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running: reusing it"
    return
  fi
  id munge >/dev/null 2>&1 || die "no 'munge' user: reinstall the munge package"
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  rm -f /run/munge/munged.pid
  runuser -u munge -- munged || die "munged did not start: see /var/log/munge/munged.log"
  local i
  for i in $(seq 1 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
      # munged answers a moment before its pid file may be there
      wait_pidfile /run/munge/munged.pid munged /var/log/munge/munged.log
      echo "$WAITED_PID" > "$STATE/munged.pid"   # we started it: stop it on `stop`
      say "munged started (pid $WAITED_PID)"
      return
    fi
    sleep 0.2
  done
  die "munged does not answer: see /var/log/munge/munged.log"
}

write_nodes() {  # $STATE/nodes: the machine itself for one node; node1..nodeN on 127.0.0.2.. for more
  local i prefix=127.0.0
  : > "$STATE/nodes"
  if [ "$NODES" -eq 1 ]; then echo "$HOST 127.0.0.1 $SLURMD_PORT" > "$STATE/nodes"; return; fi
  [ -n "$LINK" ] && prefix=$SUBNET
  for i in $(seq 1 "$NODES"); do echo "node$i $prefix.$((i + 1)) $((SLURMD_PORT + i - 1))" >> "$STATE/nodes"; done
}

write_conf() {
  # CPUs: what slurmd sees, at least 4 per node, so 2-task jobs (and a job beside a Jupyter step) fit
  # on a small CI machine; config_overrides makes slurmd accept a count above the hardware's.
  local cpus mem suffix="" names CTLD_ADDR=127.0.0.1
  [ -n "$LINK" ] && CTLD_ADDR=$SUBNET.1   # the bridge: the nodes' one way to the controller
  cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -n1)
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
  [ -n "$cpus" ] && [ -n "$mem" ] || die "could not read CPUs/RealMemory from \`slurmd -C\`"
  [ "$cpus" -lt 4 ] && cpus=4
  multi && suffix="-%n"
  names=$(node_names | paste -sd, -)
  cat > "$CONF" <<EOF
# Generated by scripts/slurm_local.sh on $(date -u +%FT%TZ): a test cluster of $NODES node(s).
ClusterName=dltutor
SlurmctldHost=$HOST($CTLD_ADDR)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool$suffix
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd$suffix.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd$suffix.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
# A requeued job may start again only once its old credentials expired (cred_expire, 120 s by
# default): 80 s here so that lab 10's requeued jobs wait less. Not less: after a node failure
# slurmctld's kill of the job's old run reaches the revived node only at its next RPC retry
# (47-49 s after the requeue, seen here); with 20 s the requeued run had started and was killed.
AuthInfo=cred_expire=80
InactiveLimit=0
SlurmdTimeout=${DLTUTOR_SLURMD_TIMEOUT:-20}
EOF
  local name addr port
  while read -r name addr port; do
    echo "NodeName=$name NodeAddr=$addr Port=$port CPUs=$cpus RealMemory=$mem State=UNKNOWN" >> "$CONF"
  done < "$STATE/nodes"
  echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >> "$CONF"
}

# ---- the nodes of a several-node cluster: namespaces, hosts file, ssh --------------------------
write_node_files() {  # $STATE/hosts and $STATE/ssh: keys, the sshd's and the clients' configuration
  local ssh=$STATE/ssh name addr port
  { cat /etc/hosts; echo "# the nodes of the dltutor test cluster (scripts/slurm_local.sh)"
    while read -r name addr port; do echo "$addr $name"; done < "$STATE/nodes"; } > "$STATE/hosts"
  rm -rf "$ssh"; mkdir -p -m 700 "$ssh"
  ssh-keygen -q -t ed25519 -N "" -C "dltutor test cluster host" -f "$ssh/host_ed25519"
  ssh-keygen -q -t ed25519 -N "" -C "dltutor test cluster user" -f "$ssh/id_ed25519"
  cp "$ssh/id_ed25519.pub" "$ssh/authorized_keys"
  SSH_PORT=""
  for port in 2222 12222 22222 32222 42222; do
    if port_free "$port"; then SSH_PORT=$port; break; fi
  done
  [ -n "$SSH_PORT" ] || die "no free port for the nodes' sshd (tried 2222 and neighbours)"
  while read -r name addr port; do
    echo "[$name]:$SSH_PORT,[$addr]:$SSH_PORT $(cut -d' ' -f1-2 "$ssh/host_ed25519.pub")"
  done < "$STATE/nodes" > "$ssh/known_hosts"
  cat > "$ssh/ssh_config" <<EOF
# The ssh client configuration on the nodes of the dltutor test cluster (scripts/slurm_local.sh):
# the nodes' own sshd, the cluster's key, the cluster's known hosts.
Host $(node_names | paste -sd' ' -) $(cut -d' ' -f2 "$STATE/nodes" | paste -sd' ' -)
  Port $SSH_PORT
  IdentityFile $ssh/id_ed25519
  UserKnownHostsFile $ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
EOF
  cat > "$ssh/sshd_config" <<EOF
# The sshd of a node of the dltutor test cluster (scripts/slurm_local.sh); ListenAddress per node.
Port $SSH_PORT
HostKey $ssh/host_ed25519
AuthorizedKeysFile $ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv *
LogLevel ERROR
EOF
}

# ---- --link: the nodes' network namespaces, veths, bridge and cap (net_id ... remove_link) ----
source "$(dirname "${BASH_SOURCE[0]}")/slurm_local_link.sh"

start_node() {  # start_node <name>: slurmd and sshd of one node, in its own UTS + mount namespaces
  local name=$1 addr
  addr=$(node_field "$name" 2)
  mkdir -p /run/sshd   # sshd's privilege-separation directory (Debian's package leaves it to systemd)
  local enter=()       # --link: into the node's network namespace (nsenter, not `ip netns exec`,
  [ -f "$STATE/link" ] && enter=(nsenter "--net=/run/netns/$(netns_of "$name")")  # which remounts /sys)
  "${enter[@]}" unshare --uts --mount --propagation private -- bash -c '
    set -e
    hostname "$1"
    mount --bind "$2/hosts" /etc/hosts
    mount --bind "$2/ssh/ssh_config" /etc/ssh/ssh_config
    slurmd -f "$3" -N "$1"
    /usr/sbin/sshd -f "$2/ssh/sshd_config" -o ListenAddress="$4" -o PidFile="$2/sshd-$1.pid" -E "$2/log/sshd-$1.log"
  ' start_node "$name" "$STATE" "$CONF" "$addr" || die "node $name did not start: see $STATE/log/slurmd-$name.log"
  wait_pidfile "$STATE/slurmd-$name.pid" "slurmd of node $name" "$STATE/log/slurmd-$name.log"
  readlink "/proc/$WAITED_PID/ns/uts" > "$STATE/ns-$name"
  wait_pidfile "$STATE/sshd-$name.pid" "sshd of node $name" "$STATE/log/sshd-$name.log"
}

wait_pidfile() {  # wait_pidfile <file> <what> <log>: a daemon writes its pid file after it forks;
  # wait (TIMEOUT s at most) until the file holds the pid of a running process: WAITED_PID.
  # Every read of a daemon's pid file at start goes through here (one read: a file being written
  # may be empty for a moment, and "$(cat)" of an empty file would make /proc/ look like a pid).
  local deadline=$(( $(date +%s) + TIMEOUT )) pid
  while :; do
    pid=$(cat "$1" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] && { WAITED_PID=$pid; return 0; }
    [ "$(date +%s)" -lt "$deadline" ] || die "$2 wrote no pid file ($1) within $TIMEOUT s: see $3"
    sleep 0.1
  done
}

node_pids() {  # node_pids <name>: every process in the node's UTS namespace
  local ns pid
  ns=$(cat "$STATE/ns-$1" 2>/dev/null) || return 0
  # one `ls` for all: "... /proc/<pid>/ns/uts -> uts:[<inode>]" (a zombie's links cannot be read)
  ls -l /proc/[0-9]*/ns/uts 2>/dev/null | awk -v ns="$ns" '$NF == ns { split($(NF - 2), p, "/"); print p[3] }'
  return 0
}

kill_node() {  # every process on the node, at once (a node that dies); waits until they are gone
  local pids i
  pids=$(node_pids "$1")
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  for i in $(seq 1 100); do [ -z "$(node_pids "$1")" ] && break; sleep 0.05; done
  [ -z "$(node_pids "$1")" ] || die "processes of node $1 survived SIGKILL: $(node_pids "$1" | tr '\n' ' ')"
  rm -f "$STATE/slurmd-$1.pid" "$STATE/sshd-$1.pid"
}

wait_idle() {  # wait_idle <node>...: each node idle (or running jobs), drained/down ones resumed
  local deadline=$(( $(date +%s) + TIMEOUT )) node state states
  while [ "$(date +%s)" -lt "$deadline" ]; do
    states=""
    for node in "$@"; do
      state=$(timeout 10 sinfo -h -n "$node" -o %T 2>/dev/null | head -n1 || true)
      case "$state" in
        idle|mixed|allocated) ;;
        drain*|down*) timeout 10 scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
      esac
      states+="$node:${state:-?} "
    done
    if ! grep -qvE ':(idle|mixed|allocated)$' <<<"$(tr ' ' '\n' <<<"${states% }")"; then
      say "${states% } (SLURM_CONF=$CONF)"; return 0
    fi
    sleep 0.5
  done
  echo "---- slurmctld.log" >&2; tail -n 20 "$STATE/log/slurmctld.log" >&2 || true
  for node in "$@"; do echo "---- slurmd log of $node" >&2; tail -n 20 "$STATE"/log/slurmd*"$node"*.log "$STATE/log/slurmd.log" 2>/dev/null >&2 || true; done
  die "not every node idle after ${TIMEOUT}s (${states% }); logs in $STATE/log"
}

stop_pid() {  # stop_pid <pidfile> <name>: TERM, wait, KILL; only if the pid is still that program
  local pid i
  alive "$1" "$2" || { rm -f "$1"; return 0; }
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 200); do gone "$pid" && break; sleep 0.05; done
  gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$1"
  say "stopped $2 (pid $pid)"
}

stop_daemons() {  # the compute nodes (all that is in their namespaces), then slurmctld
  local n
  for n in $(node_names); do
    stop_pid "$(slurmd_pidfile "$n")" slurmd
    if [ -f "$STATE/ns-$n" ]; then stop_pid "$STATE/sshd-$n.pid" sshd; kill_node "$n"; rm -f "$STATE/ns-$n"; fi
  done
  stop_pid "$STATE/slurmctld.pid" slurmctld
  remove_link
}

cmd_start() {
  need_tools
  mkdir -p "$STATE"
  if running; then
    local have
    have=$(wc -l < "$STATE/nodes")
    [ -z "$NODES" ] || [ "$have" -eq "$NODES" ] || die "a cluster of $have node(s) is running; \`$0 stop\` it first to start $NODES"
    [ "$(link_rate)" = "$LINK" ] || die "a cluster with $(link_words "$(link_rate)") is running; \`$0 stop\` it first to start one with $(link_words "$LINK")"
    say "already running (SLURM_CONF=$CONF)"; echo "SLURM_CONF=$CONF"; return 0
  fi
  NODES=${NODES:-1}
  [ -z "$LINK" ] || [ "$NODES" -gt 1 ] || die "--link needs a cluster of several nodes (--nodes 2 or more)"
  # Half-started leftovers of an earlier run: stop them before starting afresh.
  if [ -f "$STATE/nodes" ]; then stop_daemons; fi
  start_munge
  rm -rf "$STATE/state" "$STATE"/spool* "$STATE/log" "$STATE/hosts" "$STATE/ssh"
  mkdir -p "$STATE/state" "$STATE/log"
  pick_ports
  [ -z "$LINK" ] || pick_subnet
  write_nodes
  write_conf
  slurmctld -f "$CONF" -i || die "slurmctld did not start: see $STATE/log/slurmctld.log"
  wait_pidfile "$STATE/slurmctld.pid" slurmctld "$STATE/log/slurmctld.log"
  if multi; then
    write_node_files
    [ -z "$LINK" ] || make_link
    local n
    for n in $(node_names); do mkdir -p "$STATE/spool-$n"; start_node "$n"; done
  else
    mkdir -p "$STATE/spool"
    slurmd -f "$CONF" || die "slurmd did not start: see $STATE/log/slurmd.log"
    wait_pidfile "$STATE/slurmd.pid" slurmd "$STATE/log/slurmd.log"
  fi
  wait_idle $(node_names)
  echo "SLURM_CONF=$CONF"
}

cmd_stop() {
  if answers; then  # our controller knows only our jobs
    timeout 10 scancel --full $(timeout 10 squeue -h -o %i 2>/dev/null) >/dev/null 2>&1 || true
  fi
  stop_daemons
  if [ -f "$STATE/munged.pid" ]; then stop_pid "$STATE/munged.pid" munged; fi
}

cmd_status() {
  if running; then
    say "running (SLURM_CONF=$CONF, slurmctld pid $(cat "$STATE/slurmctld.pid"), nodes: $(node_names | paste -sd' ' -))"
    [ -f "$STATE/link" ] && say "link between the nodes: $(link_rate) (network namespaces, bridge $(bridge_name))"
    timeout 10 sinfo
    return 0
  fi
  say "not running (state dir $STATE)"
  return 3
}

known_node() {
  multi || die "kill-node and revive-node need a cluster of several nodes (start --nodes 2)"
  [ -n "$(node_field "${1:-}" 1)" ] || die "no node '${1:-}' in this cluster: $(node_names | paste -sd' ' -)"
}

cmd_kill_node() {  # the node dies: slurmd, sshd and every step on it killed at once, no goodbye
  known_node "${1:-}"
  kill_node "$1"
  say "node $1 killed (every process on it); Slurm marks it down within SlurmdTimeout"
}

cmd_revive_node() {  # the node boots again and is put back in service
  known_node "${1:-}"
  kill_node "$1"
  start_node "$1"
  timeout 10 scontrol update nodename="$1" state=resume >/dev/null 2>&1 || true
  wait_idle "$1"
}

action=${1:-}; shift || true
while [ "$action" = start ] && [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=${2:-}; shift 2 || die "--nodes needs a number"
      [[ "$NODES" =~ ^[1-9][0-9]?$ ]] || die "--nodes takes a number of nodes from 1 to 99, not '$NODES'" ;;
    --link) LINK=${2:-}; shift 2 || die "--link needs a rate (100mbit, 1gbit) or 'unlimited'"
      [[ "$LINK" =~ ^(([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]+)(kbit|mbit|gbit)|unlimited)$ ]] \
        || die "--link takes a rate in tc's units (100mbit, 1gbit) or 'unlimited', not '$LINK'" ;;
    *) die "unknown option '$1' (start [--nodes N] [--link RATE])" ;;
  esac
done
case "$action" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  kill-node) cmd_kill_node "${1:-}" ;;
  revive-node) cmd_revive_node "${1:-}" ;;
  *) echo "usage: $0 start [--nodes N] [--link RATE] | stop | status | env | kill-node NODE | revive-node NODE" >&2; exit 2 ;;
esac
