#!/usr/bin/env bash
# Stops the cluster slurm/local/start.sh started: cancels its jobs, then sends
# TERM (KILL after 10 s) to slurmd, slurmctld and munged by the PIDs in their
# pid files, each checked to still be that daemon. Never kills by name.
#
#   slurm/local/stop.sh [STATE_DIR]     (default $PD_SLURM_DIR, as for start.sh)
#   PD_SLURM_WIPE=1                     also removes the state directory
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${PD_SLURM_DIR:-${TMPDIR:-/tmp}/pipedream-slurm}}
. "$here/pidfile.sh"
export SLURM_CONF=$dir/etc/slurm.conf

if [ -f "$SLURM_CONF" ] && pd_slurm_pid_alive "$(cat "$dir/run/slurmctld.pid" 2>/dev/null)"; then
    jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        echo "slurm/local/stop.sh: cancelling jobs $jobs" >&2
        scancel $jobs 2>/dev/null || true
        for _ in $(seq 100); do
            [ -z "$(squeue -h -t running,pending,completing -o %A 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
fi

for daemon in slurmd slurmctld munged; do
    pidfile=$dir/run/$daemon.pid
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if pd_slurm_pid_alive "$pid"; then
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$daemon" ]; then
            echo "slurm/local/stop.sh: pid $pid is not $daemon (stale $pidfile); left alone" >&2
            rm -f "$pidfile"
            continue
        fi
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do pd_slurm_pid_alive "$pid" || break; sleep 0.1; done
        if pd_slurm_pid_alive "$pid"; then
            echo "slurm/local/stop.sh: $daemon ($pid) ignored TERM; killing it" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    rm -f "$pidfile"
done
[ "${PD_SLURM_WIPE:-0}" = 1 ] && rm -rf "$dir"
exit 0
