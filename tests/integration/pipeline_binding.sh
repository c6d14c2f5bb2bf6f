#!/bin/sh
# Each pipeline rank binds itself at start-up and says where, in one line
# (src/runtime/binding.c), on a small MLP with synthetic data on 2 ranks:
#  (a) --bind auto (the default) on this machine: one line per rank, with
#      its own cores when the machine has a core per rank (else "not
#      bound" and why), and the run trains;
#  (b) --bind none and PD_BIND=none: "not bound (...)", the run trains;
#  (c) a bad --bind or PD_BIND, and PD_TOPO_XML naming a missing file:
#      exit 2 and one line naming it (under mpirun every rank says so and
#      the job fails);
#  (d) as srun --mpi=pmix starts ranks (SLURM_PROCID, SLURM_LOCALID,
#      SLURM_NTASKS from the launcher) with CUDA_VISIBLE_DEVICES=9,12 and
#      PD_TOPO_XML the DGX-2's hwloc XML: local rank 0 takes GPU 9, rank 1
#      GPU 12, both on NUMA node 1, and the line says the GPU is unused on
#      this CPU run and why nothing is bound (the XML is not this machine);
#      a SLURM_LOCALID that disagrees with MPI is named;
#  (e) more local ranks than cores (5 CPU workers on the XML's 4 cores,
#      CUDA_VISIBLE_DEVICES=NoDevFiles): not bound, saying so.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
dgx2="$top_srcdir/tests/topology/nvidiaDGX2.xml"

. "$top_srcdir/tests/integration/pipeline_env.sh"
unset PD_BIND PD_TOPO_XML CUDA_VISIBLE_DEVICES SLURM_GPUS_ON_NODE SLURM_PROCID SLURM_LOCALID SLURM_NTASKS 2>/dev/null || :
common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size 8 --seed 1 --steps 4"
mlp_profile_and_plans

# run NAME RANKS [options]: mpirun on the 2-stage plan, stderr in $work/NAME.err.
run() {
    r_name=$1 r_ranks=$2
    shift 2
    status=0
    timeout 120 mpirun $mpirun_flags -np "$r_ranks" "$@" --plan "$work/two.plan.json" \
        --profile "$work/mlp.profile.json" >"$work/$r_name.out" 2>"$work/$r_name.err" || status=$?
    [ "$status" -ne 124 ] || fail "$r_name: mpirun -np $r_ranks hung (killed after 120 s)"
}
trained() {
    [ "$status" -eq 0 ] || { cat "$work/$1.err"; fail "$1: exited $status"; }
    grep -q '"minibatches":4' "$work/$1.out" || { cat "$work/$1.out"; fail "$1: no summary of 4 minibatches"; }
}
# The binding line of rank $2 in run $1.
line() {
    grep "^pipedream: rank $2 (local " "$work/$1.err" || :
}
# Wraps the program as srun starts it: this rank's Slurm variables from the
# MPI launcher's (Open MPI's or Hydra's), then $extra.
srun_like() {
    cat >"$work/srun-like" <<'EOF'
#!/bin/sh
SLURM_PROCID=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}
SLURM_LOCALID=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-}}
SLURM_NTASKS=${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-}}
[ -n "$SLURM_PROCID" ] && [ -n "$SLURM_LOCALID" ] && [ -n "$SLURM_NTASKS" ] || { echo "srun-like: no rank from the launcher" >&2; exit 3; }
export SLURM_PROCID SLURM_LOCALID SLURM_NTASKS
[ -z "${LOCALID_OVERRIDE:-}" ] || SLURM_LOCALID=$LOCALID_OVERRIDE
exec "$@"
EOF
    chmod +x "$work/srun-like"
}

# (a)
run auto 2 "$pd" train $common
trained auto
cores=$("$pd" topo 2>/dev/null | sed -n 's/.*packages [0-9]*, cores \([0-9]*\),.*/\1/p' | head -1)
for r in 0 1; do
    l=$(line auto $r)
    [ -n "$l" ] || { cat "$work/auto.err"; fail "auto: rank $r printed no binding line"; }
    [ "$(line auto $r | wc -l)" -eq 1 ] || fail "auto: rank $r printed several binding lines"
    case $l in *"(local $r of 2): "*) ;; *) fail "auto: rank $r: not local rank $r of 2: $l" ;; esac
    if [ "${cores:-0}" -ge 2 ]; then
        case $l in *"not bound"*) fail "auto: rank $r not bound on a machine of $cores cores: $l" ;; esac
        case $l in *", core"*) ;; *) fail "auto: rank $r names no cores: $l" ;; esac
    else
        case $l in *"not bound: 2 local ranks on"*) ;; *) fail "auto: 2 ranks on $cores core(s) bound: $l" ;; esac
    fi
    echo "ok: auto: $l"
done
if [ "${cores:-0}" -ge 2 ]; then
    c0=$(line auto 0 | sed -n 's/.*, cores\{0,1\} \([-0-9]*\).*/\1/p')
    c1=$(line auto 1 | sed -n 's/.*, cores\{0,1\} \([-0-9]*\).*/\1/p')
    [ -n "$c0" ] && [ "$c0" != "$c1" ] || fail "auto: ranks 0 and 1 bound to the same cores ($c0, $c1)"
fi

# (b)
run none 2 "$pd" train $common --bind none
trained none
[ "$(grep -c 'not bound (--bind none)$' "$work/none.err")" -eq 2 ] || { cat "$work/none.err"; fail "--bind none"; }
run envnone 2 env PD_BIND=none "$pd" train $common
trained envnone
[ "$(grep -c 'not bound (PD_BIND=none)$' "$work/envnone.err")" -eq 2 ] || { cat "$work/envnone.err"; fail "PD_BIND=none"; }
echo "ok: --bind none and PD_BIND=none bind nothing and train"

# (c) refused before any rank starts (--np), one line, exit 2
refused() { # needle command...
    needle=$1
    shift
    status=0
    "$@" >"$work/refused.out" 2>"$work/refused.err" || status=$?
    [ "$status" -eq 2 ] || { cat "$work/refused.err"; fail "$*: exit $status, expected 2"; }
    [ "$(wc -l <"$work/refused.err")" -eq 1 ] || { cat "$work/refused.err"; fail "$*: not one line"; }
    grep -qF "$needle" "$work/refused.err" || { cat "$work/refused.err"; fail "$*: no '$needle'"; }
    echo "ok: refused: $(cat "$work/refused.err")"
}
refused "bind 'cores': expected auto or none" "$pd" train $common --np 2 --bind cores
refused "PD_BIND='numa': expected auto or none" env PD_BIND=numa "$pd" train $common --np 2
refused "PD_TOPO_XML: $work/missing.xml: cannot open" env PD_TOPO_XML="$work/missing.xml" "$pd" train $common --np 2
# under mpirun each rank refuses, and the job fails
run missing 2 env PD_TOPO_XML="$work/missing.xml" "$pd" train $common
[ "$status" -ne 0 ] || fail "PD_TOPO_XML missing: the job exited 0"
grep -q "PD_TOPO_XML: $work/missing.xml: cannot open" "$work/missing.err" || { cat "$work/missing.err"; fail "missing XML not named"; }
! grep -q '^pipedream: rank [01] (local' "$work/missing.err" || fail "PD_TOPO_XML missing: a rank bound anyway"
echo "ok: PD_TOPO_XML naming a missing file fails the job, naming it"

# (d)
srun_like
run slurm 2 env CUDA_VISIBLE_DEVICES=9,12 PD_TOPO_XML="$dgx2" "$work/srun-like" "$pd" train $common
trained slurm
l0=$(line slurm 0) l1=$(line slurm 1)
case $l0 in *"(local 0 of 2): GPU 9 (0000:b9:00.0, cuda:0), no NIC, NUMA 1, core 2;"*) ;;
*) fail "slurm: rank 0: $l0" ;; esac
case $l1 in *"(local 1 of 2): GPU 12 (0000:e0:00.0, cuda:1), no NIC, NUMA 1, core 3;"*) ;;
*) fail "slurm: rank 1: $l1" ;; esac
for l in "$l0" "$l1"; do
    case $l in *"the GPU is not used: device cpu"*) ;; *) fail "slurm: the line hides that no GPU is used: $l" ;; esac
    case $l in *"not bound: PD_TOPO_XML describes another machine"*) ;; *) fail "slurm: bound to a foreign XML: $l" ;; esac
    case $l in *"SLURM_LOCALID"*) fail "slurm: SLURM_LOCALID agrees with MPI, yet: $l" ;; esac
done
echo "ok: srun-like: $l0"
echo "ok: srun-like: $l1"
run localid 2 env CUDA_VISIBLE_DEVICES=9,12 PD_TOPO_XML="$dgx2" LOCALID_OVERRIDE=0 "$work/srun-like" "$pd" \
    train $common
trained localid
line localid 1 | grep -q "GPU 12 .*SLURM_LOCALID=0 is not MPI's local rank 1 (MPI's used)" ||
    { cat "$work/localid.err"; fail "a SLURM_LOCALID that disagrees with MPI is not named"; }
echo "ok: a SLURM_LOCALID that disagrees with MPI's local rank is named, MPI's used"

# (e)
run many 5 env CUDA_VISIBLE_DEVICES=NoDevFiles PD_TOPO_XML="$dgx2" "$pd" train $common
trained many
[ "$(grep -c '(local [0-4] of 5): no GPU, no NIC; not bound: 5 local ranks on 4 cores; CUDA_VISIBLE_DEVICES shows no GPU$' \
    "$work/many.err")" -eq 5 ] || { cat "$work/many.err"; fail "5 ranks on 4 cores"; }
echo "ok: $(line many 4)"
