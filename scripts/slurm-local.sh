#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests and CI: munged, slurmctld and emulated nodes n1..nN
# (one slurmd each, fake GPUs made with mknod), and accounting (slurmdbd on a MariaDB server of its own, so
# `sacct` shows every job's states), from Debian's packages. Runs as root; needs no network once installed.
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
#   SLURM_LOCAL_DBD_PORT slurmdbd (slurmctld's port + 2). MariaDB listens on a socket in BASE/run only.
#   SLURM_LOCAL_ACCOUNTING=0 runs no slurmdbd/MariaDB (sacct then says accounting is disabled)
#   SLURM_LOCAL_DEBUG the daemons' log level (info; debug logs every kill and launch request)
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
DBD_PORT=${SLURM_LOCAL_DBD_PORT:-$((PORT + 2))}
ACCOUNTING=${SLURM_LOCAL_ACCOUNTING:-1}
DB_SOCKET=$BASE/run/mariadb.sock
# MariaDB sized for a test database: small redo log and buffer pool, no fsync per commit (a crash loses only
# test accounting), no binary log; no TCP (a socket in BASE/run).
DB_SERVER_OPTIONS=(--user=root --skip-log-bin --innodb-log-file-size=4M --innodb-buffer-pool-size=32M
    --innodb-doublewrite=0 --innodb-flush-log-at-trx-commit=0 --innodb-flush-method=nosync
    --innodb-file-per-table=0)
CONF=$BASE/etc/slurm.conf
HOSTS_TAG="# megatron-launch slurm-local $BASE"

log() { printf '[slurm-local %5ss] %s\n' "$SECONDS" "$*" >&2; }
die() { log "error: $*"; exit 1; }

node_names() { local i; for ((i = 1; i <= NODES; i++)); do printf '%s%d ' "$PREFIX" "$i"; done; }

pid_files() {
    local f
    for f in "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid" "$BASE/run/slurmdbd.pid" "$BASE/run/mariadbd.pid" \
        "$BASE/run/munged.pid"; do
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
    [[ $(alive_pids | wc -l) -eq $((NODES + 2 + (ACCOUNTING ? 2 : 0))) ]] || return 1
    [[ $(count_nodes idle,alloc,mix,comp) -eq $NODES ]]
}

install_packages() {
    local packages=(slurmctld slurmd slurm-client munge) commands=(slurmctld slurmd sbatch munged) c missing=0
    # MariaDB's server and install script (mariadb-server-core; its client mariadb-client-core has the script's
    # my_print_defaults): the server itself, without mariadb-server's service wrappers, perl and galera.
    if ((ACCOUNTING)); then
        packages+=(slurmdbd mariadb-server-core mariadb-client-core)
        commands+=(slurmdbd sacct mariadbd mariadb-install-db my_print_defaults)
    fi
    for c in "${commands[@]}"; do command -v "$c" >/dev/null || missing=1; done
    ((missing)) || return 0
    log "installing ${packages[*]} (apt-get, no recommends)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
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
SlurmdDebug=${SLURM_LOCAL_DEBUG:-info}
SlurmctldDebug=${SLURM_LOCAL_DEBUG:-info}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(if ((ACCOUNTING)); then
    # AccountingStoragePass: the munge socket that connections to slurmdbd authenticate through
    printf '%s\n' AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=localhost \
        "AccountingStoragePort=$DBD_PORT" "AccountingStoragePass=$BASE/munge-run/munge.socket.2"
else
    echo AccountingStorageType=accounting_storage/none
fi)
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
    # slurmdbd reads slurmdbd.conf next to SLURM_CONF and refuses one that others can read.
    (umask 077 && cat >"$BASE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$BASE/munge-run/munge.socket.2
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$BASE/run/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
StorageType=accounting_storage/mysql
# localhost: MariaDB's socket, named by MYSQL_UNIX_PORT in slurmdbd's environment; root by socket authentication
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    )
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

# An empty MariaDB data directory, made once per machine and MariaDB version (mariadb-install-db takes seconds)
# and copied for every cluster: root's own directory under /var/lib, so no other user can plant one.
db_template() { printf '/var/lib/megatron-launch/mariadb-%s' "$(mariadbd --version | awk '{print $3}')"; }

make_db_template() {
    [[ -d $DB_TEMPLATE/mysql ]] && return 0
    local new
    mkdir -p -m 0700 "$(dirname "$DB_TEMPLATE")"
    new=$(mktemp -d "$DB_TEMPLATE.new.XXXXXX")
    mariadb-install-db --no-defaults --datadir="$new" "${DB_SERVER_OPTIONS[@]}" --auth-root-authentication-method=socket \
        --skip-test-db --skip-name-resolve >"$BASE/log/mariadb-install.log" 2>&1 \
        || { rm -rf "$new"; die "mariadb-install-db failed; see $BASE/log/mariadb-install.log"; }
    # complete or absent; of two made at once, the first stays
    mv -T "$new" "$DB_TEMPLATE" 2>/dev/null || rm -rf "$new"
}

# MariaDB with its own data directory, BASE/db (kept across `up`s), then slurmdbd.
start_accounting() {
    mkdir -p "$BASE/run" "$BASE/log"
    if [[ ! -d $BASE/db/mysql ]]; then
        DB_TEMPLATE=$(db_template)
        make_db_template
        rm -rf "$BASE/db" "$BASE/db.new"
        cp -a "$DB_TEMPLATE" "$BASE/db.new" && mv "$BASE/db.new" "$BASE/db"
    fi
    mariadbd --no-defaults --datadir="$BASE/db" "${DB_SERVER_OPTIONS[@]}" --skip-networking --socket="$DB_SOCKET" \
        --pid-file="$BASE/run/mariadbd.pid" --log-error="$BASE/log/mariadbd.log" </dev/null >/dev/null 2>&1 &
    disown
    # A fresh `up` starts job ids at 1 again (empty state): the accounting of an earlier cluster goes with it.
    wait_for "MariaDB to answer" mariadb --no-defaults -S "$DB_SOCKET" -e "drop database if exists slurm_acct_db"
    log "mariadbd pid $(cat "$BASE/run/mariadbd.pid")"
    MYSQL_UNIX_PORT=$DB_SOCKET slurmdbd
    wait_for_pid_file "$BASE/run/slurmdbd.pid"
    wait_for "slurmdbd to answer" sacctmgr -n list cluster
    log "slurmdbd pid $(cat "$BASE/run/slurmdbd.pid") on port $DBD_PORT"
}

# Run a command (5 s each) every 0.1 s until it succeeds, 60 s at most: the daemon's own answer says it is ready.
wait_for() {
    local what=$1 until=$((SECONDS + 60))
    shift
    while ((SECONDS < until)); do
        timeout 5 "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "timed out waiting for $what; see $BASE/log/"
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
    if ((ACCOUNTING)); then start_accounting; fi
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
