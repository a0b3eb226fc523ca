#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests and CI: munged, slurmctld and emulated nodes n1..nN
# (one slurmd each, fake GPUs made with mknod), from Debian's packages. Runs as root.
#
#   scripts/slurm-local.sh up   [BASE]   install if missing, start, wait until every node is idle
#   scripts/slurm-local.sh down [BASE]   stop the daemons by their pid files, remove the /etc/hosts line
#   scripts/slurm-local.sh env  [BASE]   print `export SLURM_CONF=...` for the cluster at BASE
#
# BASE defaults to /tmp/megatron-launch-slurm. Sizes come from the environment:
#   SLURM_LOCAL_NODES (2)  SLURM_LOCAL_GPUS per node (2)  SLURM_LOCAL_CPUS per node (8)  SLURM_LOCAL_MEM MB (64000)
# A second cluster beside the first (the fault tests kill its nodes) needs its own names and ports:
#   SLURM_LOCAL_PREFIX node names (n)  SLURM_LOCAL_PORT slurmctld (6817)  SLURM_LOCAL_NODE_PORT first slurmd (17001)
#   SLURM_LOCAL_SLURMD_TIMEOUT seconds until a silent node is declared down (Slurm's default, 300)
# `up` and `down` are idempotent: `up` on a healthy cluster does nothing, on a broken one it restarts it.
# Clients find the cluster through SLURM_CONF=BASE/etc/slurm.conf (the tests also look there by default).
set -euo pipefail

action=${1:-}
BASE=${2:-${SLURM_LOCAL_BASE:-/tmp/megatron-launch-slurm}}
NODES=${SLURM_LOCAL_NODES:-2}
GPUS=${SLURM_LOCAL_GPUS:-2}
CPUS=${SLURM_LOCAL_CPUS:-8}
MEM=${SLURM_LOCAL_MEM:-64000}
PREFIX=${SLURM_LOCAL_PREFIX:-n}
PORT=${SLURM_LOCAL_PORT:-6817}
NODE_PORT=${SLURM_LOCAL_NODE_PORT:-17001}
SLURMD_TIMEOUT=${SLURM_LOCAL_SLURMD_TIMEOUT:-}
CONF=$BASE/etc/slurm.conf
HOSTS_TAG="# megatron-launch slurm-local $BASE"

log() { printf '[slurm-local %5ss] %s\n' "$SECONDS" "$*" >&2; }
die() { log "error: $*"; exit 1; }

node_names() { local i; for ((i = 1; i <= NODES; i++)); do printf '%s%d ' "$PREFIX" "$i"; done; }

pid_files() {
    local f
    for f in "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid" "$BASE/run/munged.pid"; do
        [[ -f $f ]] && printf '%s\n' "$f"
    done
    return 0
}

# The daemons of this BASE that are alive: the pid file names a live process that is still that daemon
# (a stale pid file may name a pid the system has since given to something else).
alive_pids() {
    local f pid daemon
    while read -r f; do
        pid=$(cat "$f" 2>/dev/null || true)
        daemon=$(basename "$f" .pid)
        daemon=${daemon%%-*}
        [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$daemon" ]] && printf '%s\n' "$pid"
    done < <(pid_files)
    return 0
}

# Nodes in the given states (comma-separated sinfo state names).
count_nodes() { SLURM_CONF=$CONF sinfo -h -t "$1" -o %D 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
idle_nodes() { count_nodes idle; }

# Daemons alive and every node serving (idle or running jobs): a busy cluster is a healthy one.
healthy() {
    [[ -f $CONF ]] || return 1
    [[ $(alive_pids | wc -l) -eq $((NODES + 2)) ]] || return 1
    [[ $(count_nodes idle,alloc,mix,comp) -eq $NODES ]]
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return 0
    fi
    log "installing slurmctld slurmd slurm-client munge (apt-get, no recommends)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

remove_hosts_line() {
    # Rewrite in place (cat >) rather than rename: /etc/hosts is often a bind mount.
    if grep -qF -- "$HOSTS_TAG" /etc/hosts 2>/dev/null; then
        local kept
        kept=$(grep -vF -- "$HOSTS_TAG" /etc/hosts)
        printf '%s\n' "$kept" >/etc/hosts
    fi
}

add_hosts_line() {
    # The node names must resolve: the batch script uses the first one as the rendezvous host.
    remove_hosts_line
    printf '127.0.0.1 %s %s\n' "$(node_names)" "$HOSTS_TAG" >>/etc/hosts
}

write_configs() {
    mkdir -p "$BASE"/{etc,state/ctld,log,run,fakegpu}
    cat >"$CONF" <<EOF
ClusterName=megatronlaunch
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$BASE/munge-run/munge.socket.2,cred_expire=5
SlurmctldPort=$PORT
$([[ -n $SLURMD_TIMEOUT ]] && echo "SlurmdTimeout=$SLURMD_TIMEOUT")
StateSaveLocation=$BASE/state/ctld
SlurmdSpoolDir=$BASE/state/slurmd-%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
# run both schedulers every second (defaults 60 s and 30 s), so a requeued job restarts as soon as it may
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
ReturnToService=2
# let emulated nodes advertise more CPUs/memory than the host really has
SlurmdParameters=config_overrides
NodeName=$PREFIX[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$NODE_PORT-$((NODE_PORT + NODES - 1))] CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$BASE/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$PREFIX[1-$NODES] Name=gpu File=$BASE/fakegpu/nvidia[0-$((GPUS - 1))]
EOF
    local g
    for ((g = 0; g < GPUS; g++)); do
        [[ -c $BASE/fakegpu/nvidia$g ]] || mknod "$BASE/fakegpu/nvidia$g" c 195 "$g"
    done
}

start_munged() {
    # munged refuses a socket directory that is not world-executable; the key directory stays private.
    mkdir -p "$BASE/munge" "$BASE/munge-run"
    chmod 0700 "$BASE/munge"
    chmod 0755 "$BASE/munge-run"
    if [[ ! -s $BASE/munge/munge.key ]]; then
        head -c 1024 /dev/urandom >"$BASE/munge/munge.key"
        chmod 0600 "$BASE/munge/munge.key"
    fi
    munged -S "$BASE/munge-run/munge.socket.2" --key-file="$BASE/munge/munge.key" \
        --log-file="$BASE/log/munged.log" --pid-file="$BASE/run/munged.pid" --seed-file="$BASE/munge/munge.seed"
}

wait_for_pid_file() {
    local f=$1 i
    for ((i = 0; i < 100; i++)); do
        [[ -s $f ]] && return 0
        sleep 0.1
    done
    die "$f did not appear; see $BASE/log/"
}

cmd_down() {
    local pids=() pid i
    mapfile -t pids < <(alive_pids)
    if ((${#pids[@]})); then
        log "stopping pids ${pids[*]}"
        kill "${pids[@]}" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            local left=0
            for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
            ((left)) || break
            sleep 0.1
        done
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && { log "pid $pid still alive after 10 s, sending KILL"; kill -KILL "$pid" || true; }
        done
    fi
    rm -f "$BASE"/run/*.pid
    remove_hosts_line
    log "down"
}

cmd_up() {
    if healthy; then
        log "already up at $BASE ($NODES nodes serving)"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || die "needs root (it installs packages, runs the daemons as root and edits /etc/hosts)"
    install_packages
    cmd_down
    # Start from an empty state directory: a node that once failed registration stays drained otherwise.
    rm -rf "$BASE/state"
    write_configs
    add_hosts_line
    start_munged
    wait_for_pid_file "$BASE/run/munged.pid"
    export SLURM_CONF=$CONF
    slurmctld -f "$CONF"
    wait_for_pid_file "$BASE/run/slurmctld.pid"
    local n
    for n in $(node_names); do
        mkdir -p "$BASE/state/slurmd-$n"
        slurmd -f "$CONF" -N "$n"
        wait_for_pid_file "$BASE/run/slurmd-$n.pid"
    done
    local i
    for ((i = 0; i < 300; i++)); do
        [[ $(idle_nodes) -eq $NODES ]] && break
        sleep 0.2
    done
    [[ $(idle_nodes) -eq $NODES ]] || { sinfo -N -l >&2 || true; die "nodes not idle after 60 s; see $BASE/log/"; }
    log "up: $NODES nodes x $GPUS GPUs idle; export SLURM_CONF=$CONF"
}

case $action in
    up) cmd_up ;;
    down) cmd_down ;;
    env) printf 'export SLURM_CONF=%q\n' "$CONF" ;;
    *)
        echo "usage: $0 up|down|env [BASE]" >&2
        exit 2
        ;;
esac
