#!/usr/bin/env bash
# Starts a single-node Slurm cluster on localhost for tests and laptops:
# munged, slurmctld and slurmd as background daemons (no systemd, no cgroups),
# every file under one state directory, fake GPUs declared as GRES so that
# jobs see SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES as on a GPU cluster.
# slurm/local/stop.sh stops the daemons by the PIDs they wrote.
#
#   slurm/local/start.sh [STATE_DIR]
#   . STATE_DIR/slurm.env        # exports SLURM_CONF for sbatch, srun, squeue
#
# Settings (environment):
#   PD_SLURM_DIR        state directory (default ${TMPDIR:-/tmp}/pipedream-slurm); its
#                       etc/ run/ log/ spool/ munge/ are recreated on every start
#   PD_SLURM_CPUS       CPUs the node advertises (default 8; more than the cores is fine)
#   PD_SLURM_GPUS       fake GPUs (default 4; 0: no GRES)
#   PD_SLURM_AUTH       munge (default) or none (no munged)
#   PD_SLURM_CTLD_PORT  slurmctld's port (default 6817)
#   PD_SLURM_D_PORT     slurmd's port (default 6818)
#   PD_SLURM_MPI        MpiDefault: none (default) or pmix
#   PD_SLURM_TIMEOUT    seconds to wait for the node to become idle (default 30)
# Exit status: 0 ready, 1 failed (the daemons it started are stopped again),
# 77 Slurm or munge is not installed (Debian: apt-get install slurm-wlm munge).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${PD_SLURM_DIR:-${TMPDIR:-/tmp}/pipedream-slurm}}
cpus=${PD_SLURM_CPUS:-8}
gpus=${PD_SLURM_GPUS:-4}
auth=${PD_SLURM_AUTH:-munge}
ctld_port=${PD_SLURM_CTLD_PORT:-6817}
d_port=${PD_SLURM_D_PORT:-6818}
mpi=${PD_SLURM_MPI:-none}
timeout=${PD_SLURM_TIMEOUT:-30}

say() { echo "slurm/local/start.sh: $*" >&2; }
fail() { say "error: $*"; PD_SLURM_DIR=$dir "$here/stop.sh" >/dev/null 2>&1 || true; exit 1; }

# Missing software is a skip for tests, not a failure.
for prog in slurmctld slurmd sinfo sbatch; do
    command -v "$prog" >/dev/null 2>&1 || { say "$prog not found (Debian package slurm-wlm)"; exit 77; }
done
if [ "$auth" = munge ]; then
    for prog in munged munge unmunge; do
        command -v "$prog" >/dev/null 2>&1 || { say "$prog not found (Debian package munge; or PD_SLURM_AUTH=none)"; exit 77; }
    done
fi
case $auth in munge|none) ;; *) say "PD_SLURM_AUTH must be munge or none, not '$auth'"; exit 2 ;; esac
case $gpus in ''|*[!0-9]*) say "PD_SLURM_GPUS must be a count, not '$gpus'"; exit 2 ;; esac
case $cpus in ''|*[!0-9]*|0) say "PD_SLURM_CPUS must be a positive count, not '$cpus'"; exit 2 ;; esac

. "$here/pidfile.sh"
for pidfile in "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/run/munged.pid"; do
    if pd_slurm_pid_alive "$(cat "$pidfile" 2>/dev/null || true)"; then
        say "a daemon of $dir is still running (pid $(cat "$pidfile")); run slurm/local/stop.sh $dir first"
        exit 1
    fi
done

user=$(id -un)
[ "$(id -u)" = 0 ] || say "warning: not root: the daemons and jobs run as $user"

rm -rf "$dir/etc" "$dir/run" "$dir/log" "$dir/spool" "$dir/munge" "$dir/dev"
mkdir -p "$dir/etc" "$dir/run" "$dir/log" "$dir/spool/ctld" "$dir/spool/d" "$dir/munge/key"
# munged's checks: the socket's directory searchable by all, the key private.
chmod 755 "$dir/munge"
chmod 700 "$dir/munge/key"
conf=$dir/etc/slurm.conf

if [ "$auth" = munge ]; then
    socket=$dir/munge/socket
    head -c 1024 /dev/urandom > "$dir/munge/key/munge.key"
    chmod 400 "$dir/munge/key/munge.key"
    munged --key-file="$dir/munge/key/munge.key" --socket="$socket" \
        --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/seed" \
        --log-file="$dir/log/munged.log" || fail "munged did not start (see $dir/log/munged.log)"
    for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
    munge -S "$socket" -n | unmunge -S "$socket" >/dev/null || fail "munge credentials do not round-trip"
    auth_conf="AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket"
else
    auth_conf="AuthType=auth/none
CredType=cred/none"
fi

# Fake GPUs: Slurm's GRES files must be character (or block) devices, which
# it only stat()s; CUDA_VISIBLE_DEVICES is the index in the list. Major 195
# is NVIDIA's; with no driver behind them nothing can open them. Without the
# right to mknod, distinct existing character devices serve as well.
gres_types=
node_gres=
if [ "$gpus" -gt 0 ]; then
    mkdir -p "$dir/dev"
    files=
    for i in $(seq 0 $((gpus - 1))); do
        if mknod "$dir/dev/gpu$i" c 195 "$i" 2>/dev/null; then
            files=${files:+$files,}$dir/dev/gpu$i
        else
            files=
            break
        fi
    done
    if [ -z "$files" ]; then
        files=$(find /dev -maxdepth 1 -type c 2>/dev/null | sort | head -n "$gpus" | paste -sd, -)
        [ "$(echo "$files" | tr ',' '\n' | grep -c .)" -eq "$gpus" ] ||
            fail "cannot mknod and /dev has fewer than $gpus character devices; use PD_SLURM_GPUS=0"
        say "mknod not permitted: fake GPUs are $files"
    fi
    printf 'AutoDetect=off\nNodeName=localhost Name=gpu File=%s\n' "$files" > "$dir/etc/gres.conf"
    gres_types=GresTypes=gpu
    node_gres=Gres=gpu:$gpus
fi

memory_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)

cat > "$conf" <<CONF
# Written by slurm/local/start.sh: one node, localhost, state in $dir.
ClusterName=pipedream
SlurmctldHost=localhost
SlurmUser=$user
SlurmdUser=$user
$auth_conf
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
MailProg=/bin/true
# No cgroups, no accounting database.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=$mpi
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Start batch jobs at once (the default waits 3 s).
SchedulerParameters=batch_sched_delay=0
# Keep the node idle when it advertises more CPUs than it has.
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
# Finished jobs stay visible to scontrol for 5 minutes (there is no sacct).
MinJobAge=300
KillWait=5
Waittime=0
$gres_types
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$memory_mb $node_gres State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
echo "export SLURM_CONF=$conf" > "$dir/slurm.env"
export SLURM_CONF=$conf

# Both daemons fork into the background and write their pid files.
slurmctld -f "$conf" || fail "slurmctld did not start (see $dir/log/slurmctld.log)"
# -N: the node is "localhost" whatever the machine's host name.
slurmd -f "$conf" -N localhost || fail "slurmd did not start (see $dir/log/slurmd.log)"

deadline=$(($(date +%s) + timeout))
state=
while [ "$state" != idle ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
        fail "the node is '$state', not idle, after ${timeout}s"
    fi
    sleep 0.1
    state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
done
say "ready: $cpus CPUs, $gpus GPUs, state in $dir (munged $(cat "$dir/run/munged.pid" 2>/dev/null || echo -)," \
    "slurmctld $(cat "$dir/run/slurmctld.pid"), slurmd $(cat "$dir/run/slurmd.pid")); . $dir/slurm.env"
