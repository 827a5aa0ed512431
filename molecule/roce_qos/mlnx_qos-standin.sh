#!/bin/sh
# STAND-IN for NVIDIA's mlnx_qos, used only by the molecule roce_qos scenario:
# the test node has no ConnectX NIC. It keeps trust/PFC state per interface
# in a file, prints it in the real tool's layout (`mlnx_qos -i IF`), and
# appends every set-request to a log that the scenario's verify reads. The
# module's unit tests point both at a directory of their own.
state_dir=${MLNX_QOS_STANDIN_STATE:-/var/lib/mlnx_qos-standin}
log=${MLNX_QOS_STANDIN_LOG:-/var/log/mlnx_qos-standin.log}
iface="" trust="" pfc=""
while [ $# -gt 0 ]; do
  case "$1" in
    -i) iface=$2; shift 2 ;;
    --trust) trust=$2; shift 2 ;;
    --trust=*) trust=${1#--trust=}; shift ;;
    --pfc) pfc=$2; shift 2 ;;
    --pfc=*) pfc=${1#--pfc=}; shift ;;
    *) echo "mlnx_qos stand-in: unsupported argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$iface" ] || { echo "mlnx_qos stand-in: -i IF is required" >&2; exit 2; }
mkdir -p "$state_dir"
state="$state_dir/$iface"
[ -f "$state" ] || printf 'trust=pcp\npfc=0,0,0,0,0,0,0,0\n' > "$state"
if [ -n "$trust" ]; then echo "$iface --trust $trust" >> "$log"; fi
if [ -n "$pfc" ]; then echo "$iface --pfc $pfc" >> "$log"; fi
cur_trust=${trust:-$(sed -n 's/^trust=//p' "$state")}
cur_pfc=${pfc:-$(sed -n 's/^pfc=//p' "$state")}
printf 'trust=%s\npfc=%s\n' "$cur_trust" "$cur_pfc" > "$state"
echo "DCBX mode: OS controlled"
echo "Priority trust state: $cur_trust"
if [ "$cur_trust" = dscp ]; then
  echo "dscp2prio mapping:"
  for p in 0 1 2 3 4 5 6 7; do
    printf '\tprio:%s dscp:' "$p"
    for d in 7 6 5 4 3 2 1 0; do printf '%02d,' $((p * 8 + d)); done
    echo
  done
fi
echo "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,"
echo "Cable len: 7"
echo "PFC configuration:"
printf '\tpriority    0   1   2   3   4   5   6   7\n'
printf '\tenabled     %s   \n' "$(echo "$cur_pfc" | sed 's/,/   /g')"
for tc in 0 1 2 3 4 5 6 7; do
  echo "tc: $tc ratelimit: unlimited, tsa: vendor"
  echo "\t priority:  $tc"
done
