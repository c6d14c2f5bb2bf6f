# shellcheck shell=bash disable=SC2154 # the variables of experiments/reproduce
# `experiments/reproduce --emulated` (sourced, bash): PipeDream against data
# parallelism for real, on an emulated cluster of this machine where the
# network is the bottleneck (experiments/lib/netns.sh): $hosts network
# namespaces on a bridge, every link limited to $bandwidth by tc, one rank
# per namespace.
#
# For every model, experiments/lib/job.sh (the body of the sbatch scripts)
# runs twice under mpirun, once for PipeDream (profile on this machine,
# `pipedream plan --levels <hosts>x<bandwidth>`, 1f1b) and once for the
# data-parallel baseline (the same profile, --schedule dp), both on
# Fashion-MNIST with the same minibatches, evaluated every $eval_every
# minibatches on the first $limit_test test samples. Every rank runs
# `pipedream` inside its namespace (experiments/lib/netns-rank), so all its
# traffic crosses its link: the runtime's channels (--transport tcp; the
# tcp transport advertises the namespace's only address), Open MPI's
# all-reduce (btl tcp,self over the links' subnet: no shared memory), and
# PMIx (mpirun's server listens on the bridge's address). Bytes are the
# links' tx counters read before and after each run.
#
# The prediction for the same emulated cluster: `pipedream simulate
# --compare` of the plan on the measured profile, as measured (a core per
# host) and with its compute times multiplied by hosts / cores when the
# ranks share fewer cores (`compute x N`).
#
# Writes to $out: emulated.csv (a row per model and run), accuracy.csv (test
# accuracy against wall time), emulated.md (the table), throughput.png and
# accuracy.png (gnuplot), and every run's job directory under
# $out/<model>/<run>/.
#
# Uses: pd, here (experiments/), out, models, hosts, bandwidth, batch, steps,
# eval_every, limit_test, target, data, profile_args.

# The models' size on this machine: the paper's models at 1/8 width on
# Fashion-MNIST padded to what they need.
emulated_model_args() {
    case $1 in
    vgg16) echo "--width-mult 0.125 --channels 3 --height 32 --width 32" ;;
    alexnet) echo "--width-mult 0.125 --channels 3 --height 64 --width 64" ;;
    *) echo "" ;;
    esac
}

emulated_job=

# Trap handler: stop the running job (its own process group), then the
# namespaces (netns.sh kills anything left in them).
emulated_cleanup() {
    if [ -n "$emulated_job" ]; then
        kill -TERM -- "-$emulated_job" 2>/dev/null || true
        sleep 1
        kill -KILL -- "-$emulated_job" 2>/dev/null || true
        emulated_job=
    fi
    emu_down
}

emulated_check() {
    local m
    [ "$(id -u)" -eq 0 ] || reproduce_die "--emulated needs root (network namespaces, veth links and tc)"
    ip netns list >/dev/null 2>&1 || reproduce_die "--emulated needs 'ip netns' (iproute2 with network namespaces)"
    command -v tc >/dev/null 2>&1 || reproduce_die "--emulated needs tc (iproute2)"
    command -v setsid >/dev/null 2>&1 || reproduce_die "--emulated needs setsid (util-linux)"
    mpirun --version 2>&1 | grep -q "Open MPI" ||
        reproduce_die "--emulated needs Open MPI's mpirun (its MCA and PMIx settings put the ranks' traffic on the links)"
    emu_bits "$bandwidth" >/dev/null || reproduce_die "--bandwidth '$bandwidth': expected e.g. 1Gb/s, 100Mb/s or 12.5MB/s"
    [ "$hosts" -ge 2 ] 2>/dev/null || reproduce_die "--hosts '$hosts': expected a number of at least 2"
    if ! [ "$steps" -gt 0 ] 2>/dev/null || [ $((steps % hosts)) -ne 0 ]; then
        reproduce_die "--steps '$steps': expected a positive multiple of the hosts ($hosts) and of every stage's replicas"
    fi
    [ "$eval_every" -ge 0 ] 2>/dev/null || reproduce_die "--eval-every '$eval_every': expected a number"
    [ "$batch" -gt 0 ] 2>/dev/null || reproduce_die "--batch '$batch': expected a positive number"
    [ "$limit_test" -gt 0 ] 2>/dev/null || reproduce_die "--limit-test '$limit_test': expected a positive number"
    awk -v t="$target" 'BEGIN { exit !(t ~ /^[0-9.]+$/ && t > 0 && t <= 1) }' ||
        reproduce_die "--target '$target': expected an accuracy in (0, 1]"
    for m in $models; do
        "$pd" models 2>/dev/null | grep -q "^$m " || reproduce_die "--models: unknown model '$m' (see pipedream models)"
    done
}

# Runs job.sh for one run (pipedream or dp) of $model, counting the bytes
# the hosts send; sets run_dir (the job's directory), run_bytes (all
# hosts), run_host_bytes (per host, colon-separated) and run_wall (seconds).
emulated_run() { # run
    local run=$1 before after t0 t1 rc=0
    before=$(emu_tx_bytes | paste -sd' ')
    t0=$(date +%s.%N)
    PD_RUNS=$run PD_RESULTS="$mdir/$run" setsid bash "$here/lib/job.sh" >"$mdir/$run.job.log" 2>&1 &
    emulated_job=$!
    wait "$emulated_job" || rc=$?
    emulated_job=
    t1=$(date +%s.%N)
    after=$(emu_tx_bytes | paste -sd' ')
    if [ "$rc" -ne 0 ]; then
        tail -n 20 "$mdir/$run.job.log" >&2
        reproduce_die "$model: the $run run failed (see $mdir/$run.job.log)"
    fi
    run_dir=$(find "$mdir/$run" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    [ -s "$run_dir/$run.json" ] || reproduce_die "$model: the $run run wrote no summary (see $mdir/$run.job.log)"
    read -r run_bytes run_host_bytes < <(awk -v a="$after" -v b="$before" 'BEGIN { n = split(a, x, " "); split(b, y, " ")
        for (i = 1; i <= n; i++) { s += x[i] - y[i]; h = h (i > 1 ? ":" : "") x[i] - y[i] } printf "%.0f %s\n", s, h }')
    run_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
}

# A number from a one-line JSON summary.
emulated_field() { # file key
    sed -n "s/.*\"$2\": *\([-0-9.eE+]*\).*/\1/p" "$1"
}

# The plan's replicas per stage: 2-1-1.
emulated_config() { # plan.json
    awk '/"replicas":/ { gsub(/[^0-9]/, "", $2); c = c (c == "" ? "" : "-") $2 } END { print c }' "$1"
}

# `pipedream simulate --compare` of the plan for the emulated cluster, the
# profile's compute times multiplied by $2; prints the pipedream and dp rows'
# samples/s and bytes per sample: "pd_rate pd_bytes dp_rate dp_bytes".
# Run it in a command substitution: it exits on failure.
emulated_predict() { # jobdir factor
    local profile=$1/profile.json evals
    if [ "$2" != 1 ]; then
        profile=$mdir/profile-x$2.json
        awk -v f="$2" '/"(fwd_ms|bwd_ms|ms)":/ { v = $2; sub(/,$/, "", v); sub(/[-0-9.eE+]+/, sprintf("%.6f", v * f)) } { print }' \
            "$1/profile.json" >"$profile"
    fi
    # Evaluations: every eval_every minibatches and at the end, each over
    # the test samples in minibatches (only PipeDream's cross the links).
    evals=$((eval_every > 0 ? (steps + eval_every - 1) / eval_every : 1))
    "$pd" simulate --compare --csv --plan "$1/plan.json" --profile "$profile" --levels "${hosts}x$bandwidth" \
        --minibatches "$steps" --eval $((evals * ((limit_test + batch - 1) / batch))) >"$mdir/predicted-x$2.csv" ||
        reproduce_die "$model: pipedream simulate failed"
    awk -F, '$6 == "pipedream" { p = $11 " " $13 } $6 == "dp" { d = $11 " " $13 } END { print p, d }' "$mdir/predicted-x$2.csv"
}

# Seconds from the metrics' start to the first evaluation at or above the
# target accuracy, or "-".
emulated_time_to() { # metrics.csv
    awk -F, -v t="$target" 'NR > 1 && $8 != "" && $8 + 0 >= t { printf "%.1f\n", $3; found = 1; exit }
        END { if (!found) print "-" }' "$1"
}

reproduce_emulated() {
    local csv=$out/emulated.csv acc=$out/accuracy.csv md=$out/emulated.md cores factor model mdir run
    local rate seconds accuracy config tta pd_job pred predx p x run_dir run_bytes run_host_bytes run_wall load_start
    local -A rows
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    csv=$out/emulated.csv acc=$out/accuracy.csv md=$out/emulated.md
    # nproc without the caller's OpenMP limits: the machine's cores.
    cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    factor=1
    [ "$hosts" -le "$cores" ] || factor=$(awk -v h="$hosts" -v c="$cores" 'BEGIN { printf "%g", h / c }')

    trap emulated_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    emu_up "$hosts" "$bandwidth" || reproduce_die "could not create the emulated cluster (ip netns, veth, bridge, tc)"
    echo "reproduce: $hosts hosts ($emu_ns-0..$((hosts - 1)), $emu_subnet) on links of $bandwidth each way" >&2

    # job.sh's settings: one rank per host, this machine's cores shared.
    export PIPEDREAM=$here/lib/netns-rank PD_EMU_PIPEDREAM=$pd PD_EMU_NETNS=$emu_ns
    export PD_NTASKS=$hosts PD_LAUNCHER=mpirun PD_DEVICE=cpu PD_TRANSPORT=tcp PD_SCHEDULE=1f1b
    export PD_LEVELS=${hosts}x$bandwidth PD_DATASET=fashion-mnist PD_DATA=$data PD_BATCH=$batch PD_STEPS=$steps
    export PD_PROFILE_ARGS=$profile_args
    PD_TRAIN_ARGS="--optimizer adam --lr 0.002 --seed 1 --limit-test $limit_test"
    [ "$eval_every" -eq 0 ] || PD_TRAIN_ARGS="$PD_TRAIN_ARGS --eval-every $eval_every"
    export PD_TRAIN_ARGS
    OMP_NUM_THREADS=$((cores / hosts > 0 ? cores / hosts : 1))
    export OMP_NUM_THREADS
    # Open MPI: TCP only, over the links (not shared memory, which would
    # bypass them); PMIx's server listens on the bridge for the ranks.
    export OMPI_MCA_btl=tcp,self OMPI_MCA_pml=ob1 OMPI_MCA_btl_tcp_if_include=$emu_subnet
    export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$emu_subnet
    # The replicas' MPI_Iallreduce as a ring (what the simulator models and
    # PyTorch's data parallelism uses); Open MPI's choice for an in-place
    # one is a binomial tree, 2.3x slower for VGG16's DP here.
    export OMPI_MCA_coll_libnbc_iallreduce_algorithm=${OMPI_MCA_coll_libnbc_iallreduce_algorithm:-1}
    unset PD_PROFILE PD_CLUSTER PD_PLAN_ARGS

    echo "model,run,schedule,config,hosts,bandwidth,batch,minibatches,samples_per_s,train_seconds,wall_seconds,bytes_sent,bytes_per_sample,bytes_per_host,test_accuracy,target,seconds_to_target,predicted_samples_per_s,predicted_bytes_per_sample,predicted_samples_per_s_shared_cores" >"$csv"
    echo "model,run,minibatch,seconds,test_accuracy" >"$acc"
    for model in $models; do
        mdir=$out/$model
        rm -rf "$mdir"
        mkdir -p "$mdir"
        PD_MODEL_ARGS=$(emulated_model_args "$model")
        export PD_MODEL=$model PD_MODEL_ARGS
        unset PD_PROFILE
        for run in pipedream dp; do
            echo "reproduce: $model: $run on $hosts emulated hosts ..." >&2
            emulated_run "$run"
            # The baseline runs on PipeDream's profile.
            [ "$run" != pipedream ] || { pd_job=$run_dir; export PD_PROFILE=$run_dir/profile.json; }
            rate=$(emulated_field "$run_dir/$run.json" images_per_s)
            seconds=$(emulated_field "$run_dir/$run.json" train_seconds)
            accuracy=$(emulated_field "$run_dir/$run.json" test_accuracy)
            if [ "$run" = pipedream ]; then config=$(emulated_config "$run_dir/plan.json"); else config=$hosts; fi
            tta=$(emulated_time_to "$run_dir/$run.csv")
            rows[$run]="$model,$run,$([ "$run" = dp ] && echo dp || echo 1f1b),$config,$hosts,$bandwidth,$batch,$steps,$rate,$seconds,$run_wall,$run_bytes,$(awk -v b="$run_bytes" -v n=$((steps * batch)) 'BEGIN { printf "%.1f", b / n }'),$run_host_bytes,$accuracy,$target,$tta"
            awk -F, -v OFS=, -v m="$model" -v r="$run" 'NR > 1 && $8 != "" { print m, r, $1, $3, $8 }' \
                "$run_dir/$run.csv" >>"$acc"
            echo "reproduce: $model $run ($config): $rate samples/s, $run_bytes bytes on the links, test accuracy $accuracy" >&2
        done
        # pd_rate pd_bytes dp_rate dp_bytes, as measured and with shared cores.
        pred=$(emulated_predict "$pd_job" 1) || exit 1
        predx=$(emulated_predict "$pd_job" "$factor") || exit 1
        read -r -a p <<<"$pred"
        read -r -a x <<<"$predx"
        echo "${rows[pipedream]},${p[0]},${p[1]},${x[0]}" >>"$csv"
        echo "${rows[dp]},${p[2]},${p[3]},${x[2]}" >>"$csv"
    done
    emulated_cleanup
    trap - EXIT INT TERM

    emulated_table >"$md"
    cat "$md"
    if command -v gnuplot >/dev/null 2>&1; then
        emulated_plots
        echo "wrote $out/throughput.png and $out/accuracy.png"
    fi
    echo "wrote $csv, $acc and $md"
}

# The Markdown table: one row per model, PipeDream against DP, measured and
# predicted.
emulated_table() {
    echo "$hosts emulated hosts, links of $bandwidth each way (tc tbf), batch $batch per minibatch, $steps minibatches"
    echo "($((steps * batch)) samples) per run, Fashion-MNIST, Adam lr 0.002; test accuracy on $limit_test test samples"
    echo "every $eval_every minibatches (0: at the end); $cores cores, load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
    echo "Predicted: pipedream simulate on the measured profile (a core per host; \"x$factor\": compute x $factor, $hosts ranks on $cores cores)."
    echo
    echo "| model | PipeDream plan | PipeDream samples/s | DP samples/s | speedup measured | predicted | predicted x$factor | PipeDream bytes/sample | DP bytes/sample | DP / PipeDream bytes measured | predicted | time to $target PipeDream s | DP s | final accuracy PipeDream / DP |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    awk -F, 'NR > 1 { m = $1; r = $2; order[m] = order[m] ? order[m] : ++n; name[n] = m
            rate[m, r] = $9; bps[m, r] = $13; acc[m, r] = $15; tta[m, r] = $17; prate[m, r] = $18; pbps[m, r] = $19
            xrate[m, r] = $20; if (r == "pipedream") conf[m] = $4 }
        function ratio(a, b) { return (b > 0 ? sprintf("%.2fx", a / b) : "-") }
        END { for (i = 1; i <= n; i++) { m = name[i]
            printf "| %s | %s | %.1f | %.1f | %s | %s | %s | %.0f | %.0f | %s | %s | %s | %s | %.1f%% / %.1f%% |\n",
                m, conf[m], rate[m, "pipedream"], rate[m, "dp"], ratio(rate[m, "pipedream"], rate[m, "dp"]),
                ratio(prate[m, "pipedream"], prate[m, "dp"]), ratio(xrate[m, "pipedream"], xrate[m, "dp"]),
                bps[m, "pipedream"], bps[m, "dp"], ratio(bps[m, "dp"], bps[m, "pipedream"]),
                ratio(pbps[m, "dp"], pbps[m, "pipedream"]), tta[m, "pipedream"], tta[m, "dp"],
                100 * acc[m, "pipedream"], 100 * acc[m, "dp"] } }' "$csv"
}

emulated_plots() {
    local m plot="" sep=""
    awk -F, 'NR > 1 { m = $1; if (!(m in seen)) { seen[m] = 1; key[++n] = m }
            r[m, $2] = $9; p[m, $2] = $18; x[m, $2] = $20 }
        END { for (i = 1; i <= n; i++) { m = key[i]
            printf "%s %s %s %s %s %s %s\n", m, r[m, "pipedream"], r[m, "dp"], p[m, "pipedream"], p[m, "dp"],
                x[m, "pipedream"], x[m, "dp"] } }' "$out/emulated.csv" >"$out/throughput.dat"
    for m in $models; do
        for run in pipedream dp; do
            awk -F, -v m="$m" -v r="$run" '$1 == m && $2 == r { print $4, 100 * $5 }' "$out/accuracy.csv" >"$out/accuracy-$m-$run.dat"
            plot="$plot$sep\"$out/accuracy-$m-$run.dat\" using 1:2 with linespoints title \"$m $run\""
            sep=", "
        done
    done
    cat >"$out/plots.gp" <<EOF
set terminal pngcairo size 900,520 font ",10"
set output "$out/throughput.png"
set title "PipeDream vs data parallelism on $hosts emulated hosts, $bandwidth links"
set ylabel "samples/s"
$(reproduce_bar_style)
set key top left
plot "$out/throughput.dat" using 2:xtic(1) title "PipeDream (measured)", "" using 3 title "DP (measured)", \\
     "" using 6 title "PipeDream (predicted, compute x$factor)", "" using 7 title "DP (predicted, compute x$factor)"
set output "$out/accuracy.png"
set title "Test accuracy against wall time (Fashion-MNIST, $limit_test test samples)"
set xlabel "seconds of training"
set ylabel "test accuracy (%)"
unset style
set style data linespoints
set key bottom right
set yrange [0:100]
plot $plot
EOF
    gnuplot "$out/plots.gp"
}
