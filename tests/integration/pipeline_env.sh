# Sourced by the pipeline integration tests: mpirun settings (mpi_env.sh,
# which skips without MPI), a work directory removed on exit, one OpenMP
# thread per rank (ranks share the cores), fail(), and the small MLP's
# profile and 2- and 3-stage plans that several tests run.
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
}
