#!/usr/bin/env bash
# Runs a command under mpirun with its ranks spread over N "hosts" that are
# network namespaces of this machine: each host has its own network stack
# (one veth link onto a private bridge), its own hostname, and reaches the
# others over TCP only, as separate machines would. The MPI runs of the
# tests otherwise share one host (shared memory between ranks); this one
# exercises what a cluster does: mpirun starting a daemon per host through
# a remote-shell agent, the out-of-band wire-up and every message over TCP.
#
#   tools/scripts/netns-mpi.sh [--hosts N] [--ranks-per-host K] -- COMMAND ARGS...
#
# The hosts are 10.77.S.11, 10.77.S.12, ... (S from this script's process
# id), on a bridge only this machine can reach; nothing is routed out of
# it. Everything is removed on exit. Needs root (network namespaces);
# docs/MultiNode.md says how the same binary runs on a real cluster.
set -euo pipefail

hosts=2 per_host=1
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netns-mpi.sh: unknown option '$1' (usage: netns-mpi.sh [--hosts N] [--ranks-per-host K] -- COMMAND...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netns-mpi.sh: no command after --" >&2; exit 2; }
[[ "$hosts" =~ ^[1-9][0-9]*$ ]] && [ "$hosts" -le 8 ] ||
  { echo "netns-mpi.sh: --hosts must be 1..8, got '$hosts'" >&2; exit 2; }
[[ "$per_host" =~ ^[1-9][0-9]*$ ]] ||
  { echo "netns-mpi.sh: --ranks-per-host must be a positive integer, got '$per_host'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netns-mpi.sh: needs root (it creates network namespaces)" >&2; exit 2; }
for tool in ip unshare mpirun; do
  command -v "$tool" >/dev/null || { echo "netns-mpi.sh: '$tool' is missing" >&2; exit 2; }
done

id=$(( $$ % 200 + 20 ))
subnet=10.77.$id
tag=moe$id
bridge=${tag}br
work=$(mktemp -d)
# Removes whatever exists of the hosts, links and bridge (a failed set-up
# leaves part of them; deleting a namespace deletes its end of the veth).
cleanup() {
  for ((h = 1; h <= hosts; h++)); do
    ip netns del "${tag}h$h" 2>/dev/null || true
    ip link del "${tag}v$h" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip link add "$bridge" type bridge
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
: > "$work/hostfile"
for ((h = 1; h <= hosts; h++)); do
  ns=${tag}h$h
  ip netns add "$ns"
  ip link add "${tag}v$h" type veth peer name eth0 netns "$ns"
  ip link set "${tag}v$h" master "$bridge" up
  ip -n "$ns" addr add "$subnet.$((10 + h))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$subnet.$((10 + h)) slots=$per_host" >> "$work/hostfile"
done

# mpirun starts one daemon per host through this agent, as it would
# through ssh: `agent HOST COMMAND...` runs COMMAND in HOST's namespace
# with HOST's own hostname.
cat > "$work/agent" <<EOF
#!/usr/bin/env bash
host=\$1; shift
index=\$(( \${host##*.} - 10 ))
exec ip netns exec "${tag}h\$index" unshare --uts sh -c "hostname host\$index && exec \$*"
EOF
chmod +x "$work/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "netns-mpi: $hosts hosts x $per_host ranks over TCP ($subnet.11-$((10 + hosts)))" >&2
exports=()
for var in PATH LD_LIBRARY_PATH OPENBLAS_NUM_THREADS OMP_NUM_THREADS; do
  [ -z "${!var:-}" ] || exports+=(-x "$var")
done
rc=0
mpirun --hostfile "$work/hostfile" -np $((hosts * per_host)) --map-by "ppr:$per_host:node" \
  --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include "$subnet.0/24" --mca btl tcp,self \
  --mca btl_tcp_if_include "$subnet.0/24" --mca pml ob1 \
  "${exports[@]}" "$@" || rc=$?
exit $rc
