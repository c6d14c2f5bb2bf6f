# Sourced by the pipeline integration tests: mpirun settings (mpi_env.sh,
# which skips without MPI), a work directory removed on exit, one OpenMP
# thread per rank (ranks share the cores), fail(), the small MLP's profile
# and the plans that several tests run, running a pipeline job, and
# comparing losses.
. "$top_srcdir/tests/integration/mpi_env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
fail() {
    echo "FAIL: $*"
    exit 1
}
# Writes $work/mlp.profile.json (8x8 single-channel inputs, batch 8) and
# $work/two.plan.json, $work/three.plan.json splitting it.
mlp_profile_and_plans() {
    "$pd" profile --model mlp --batch-size 8 --channels 1 --height 8 --width 8 --classes 1000 --warmup 1 \
        --iterations 1 -o "$work/mlp.profile.json" >/dev/null 2>&1 || fail "pipedream profile"
    cat >"$work/two.plan.json" <<'JSON'
{"cluster": {"levels": "2x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "relu1", "replicas": 1},
 {"first_layer": "fc2", "last_layer": "loss", "replicas": 1}]}
JSON
    cat >"$work/three.plan.json" <<'JSON'
{"cluster": {"levels": "3x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "relu1", "replicas": 1},
 {"first_layer": "fc2", "last_layer": "relu2", "replicas": 1}, {"first_layer": "fc3", "last_layer": "loss", "replicas": 1}]}
JSON
    # One stage on 2 replicas; 2 replicas of the first stage feeding one.
    cat >"$work/dp.plan.json" <<'JSON'
{"cluster": {"levels": "2x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "loss", "replicas": 2}]}
JSON
    cat >"$work/rep.plan.json" <<'JSON'
{"cluster": {"levels": "3x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "relu1", "replicas": 2},
 {"first_layer": "fc2", "last_layer": "loss", "replicas": 1}]}
JSON
}
# run_pipeline SECONDS RANKS PLAN [options]: `pipedream train $common` of
# $work/PLAN with the MLP's profile on RANKS ranks, stdout and stderr in
# $work/out and $work/err; fails on a hang (after SECONDS) or an error.
run_pipeline() {
    r_seconds=$1 r_ranks=$2 r_plan=$3
    shift 3
    status=0
    # shellcheck disable=SC2086
    timeout "$r_seconds" mpirun $mpirun_flags -np "$r_ranks" "$pd" train $common --plan "$work/$r_plan" \
        --profile "$work/mlp.profile.json" "$@" >"$work/out" 2>"$work/err" || status=$?
    [ "$status" -ne 124 ] || fail "mpirun -np $r_ranks ($r_plan $*) hung (killed after $r_seconds s)"
    [ "$status" -eq 0 ] || { cat "$work/out" "$work/err"; fail "mpirun -np $r_ranks ($r_plan $*) exited $status"; }
}
# "iteration,loss" of every metrics row of $1 from iteration $2 on.
rows() {
    awk -F, -v from="$2" 'NR > 1 && $1 >= from { print $1 "," $4 }' "$1"
}
# The loss column of a metrics file.
losses() {
    tail -n +2 "$1" | cut -d, -f4
}
# same NAME EXPECTED ACTUAL: the two loss files are identical.
same() {
    if ! cmp -s "$2" "$3"; then
        paste -d' ' "$2" "$3" | head -5
        fail "$1: the losses differ (expected | got, first rows above)"
    fi
    echo "ok: $1: $(wc -l <"$3") losses identical"
}
