#!/usr/bin/env bash
# Prints the facts of this host that the tuning profiles depend on. Reads only; changes nothing.
#
#   tuning/check-host.sh [NODE_FILE...]     (default: tuning/cluster/node*.toml)
#
# - cores: how many this shell may run on, and the busy-spinning threads each profile needs;
# - net.core.rmem_max / wmem_max against the socket buffers the node files ask for (the kernel silently
#   caps SO_RCVBUF / SO_SNDBUF at these, and qc-node warns at start);
# - /dev/shm: where node directories (log, ingress ring, counters) live by default, and its free space
#   against the logs (3 terms of term_length each, per node);
# - isolcpus / nohz_full / rcu_nocbs in the kernel command line (cores kept free for the latency profile);
# - steal since boot and a running DAMON (kdamond) and its priority, which take a spinning agent off its core.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -eq 0 ]; then set -- "$here"/cluster/node*.toml; fi

size_bytes() { # "4MiB" | 4194304 -> bytes
    local v=$1
    case $v in
        *GiB) echo $(( ${v%GiB} << 30 ));;
        *MiB) echo $(( ${v%MiB} << 20 ));;
        *KiB) echo $(( ${v%KiB} << 10 ));;
        *B) echo "${v%B}";;
        *) echo "$v";;
    esac
}
key() { # key FILE NAME -> the value of `NAME = value` (first match), without comment
    sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\([^#]*\).*/\1/p" "$1" | head -n1 | tr -d '[:space:]"'
}

echo "== cores"
online=$(getconf _NPROCESSORS_ONLN)
allowed=$(nproc)
echo "online: $online, usable by this shell (affinity): $allowed"
echo "busy-spinning threads per node: latency 4 (3 agents + application), balanced 0, small-host 0"
if [ "$allowed" -lt 4 ]; then
    echo "  -> too few cores for the latency profile even for one node: use balanced or small-host"
fi

echo "== kernel command line (cores set aside)"
found=0
for k in isolcpus nohz_full rcu_nocbs irqaffinity; do
    v=$(tr ' ' '\n' </proc/cmdline | grep "^$k=" || true)
    if [ -n "$v" ]; then echo "$v"; found=1; fi
done
[ $found -eq 0 ] && echo "none of isolcpus, nohz_full, rcu_nocbs, irqaffinity (no cores set aside)"

echo "== socket buffers"
rmem=$(cat /proc/sys/net/core/rmem_max 2>/dev/null || echo 0)
wmem=$(cat /proc/sys/net/core/wmem_max 2>/dev/null || echo 0)
echo "net.core.rmem_max = $rmem, net.core.wmem_max = $wmem"
total_log=0
for f in "$@"; do
    [ -f "$f" ] || { echo "no such node file: $f"; continue; }
    rcv=$(key "$f" receive_buffer); snd=$(key "$f" send_buffer); term=$(key "$f" term_length)
    rcv=${rcv:-2MiB}; snd=${snd:-2MiB}; term=${term:-16MiB}
    rb=$(size_bytes "$rcv"); sb=$(size_bytes "$snd"); tb=$(size_bytes "$term")
    total_log=$(( total_log + 3 * tb ))
    line="$(basename "$f"): receive_buffer $rcv ($rb)"
    [ "$rb" -gt "$rmem" ] && line="$line > rmem_max: capped"
    line="$line, send_buffer $snd ($sb)"
    [ "$sb" -gt "$wmem" ] && line="$line > wmem_max: capped"
    echo "$line"
done
echo "  (to raise: sysctl -w net.core.rmem_max=N net.core.wmem_max=N, as root; this script does not)"

echo "== /dev/shm"
if [ -d /dev/shm ]; then
    df -B1 --output=size,avail /dev/shm | tail -n1 | while read -r size avail; do
        echo "size $size, available $avail; the logs of these node files need about $total_log bytes"
        if [ "$avail" -lt "$total_log" ]; then echo "  -> not enough room: lower term_length or enlarge /dev/shm"; fi
    done
else
    echo "no /dev/shm: node directories fall back to the temp dir (set directory = ... in the node files)"
fi

echo "== steal and the host's own stalls"
if read -r _ user nice system idle iowait irq softirq steal _ < /proc/stat 2>/dev/null; then
    total=$(( user + nice + system + idle + iowait + irq + softirq + steal ))
    echo "steal since boot: $steal of $total ticks (the hypervisor ran something else while a CPU of this guest wanted to run)"
fi
for pid in $(pgrep '^kdamond' 2>/dev/null); do
    policy=$(chrt -p "$pid" 2>/dev/null | sed -n 's/.*policy: //p')
    echo "  DAMON ($(cat /proc/"$pid"/comm 2>/dev/null), pid $pid) is running, ${policy:-policy unknown}: a kernel thread"
    echo "  that wakes about twice a second for ~1 ms turns and takes them from a busy agent's core"
    if [ "$policy" != "SCHED_IDLE" ]; then
        echo "  -> measured on a 2-core guest: the sweep's tail target met in 10-16 of 36 points, 26-27 with it under"
        echo "     SCHED_IDLE. To keep it off busy cores, as root: chrt -i -p 0 $pid (or stop DAMON); this script does not"
    fi
done
echo "  to measure what a spinning agent loses here: target/release/qc-probe --hiccups 10 (a thread per core,"
echo "  gaps in its clock reads; the sweep runs the same probe and prints 'host stalls')"
