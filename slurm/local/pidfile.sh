# Sourced by slurm/local/start.sh and stop.sh.
# pd_slurm_pid_alive PID: true when PID runs and is not a zombie (an orphaned
# daemon stays a zombie until init reaps it, and kill -0 succeeds on it).
pd_slurm_pid_alive() {
    local state
    case ${1:-} in ''|*[!0-9]*) return 1 ;; esac
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
