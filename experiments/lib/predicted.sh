# shellcheck shell=bash disable=SC2154 # the variables of experiments/reproduce
# `experiments/reproduce --predicted` (sourced, bash): PipeDream's plans
# against data parallelism, predicted by `pipedream simulate --compare` on
# the paper's clusters, side by side with the paper's Table 1.
#
# For every model with a profile and every cluster: the plans of both cost
# models and, for VGG16 and AlexNet on 16 workers, the paper's own 15-1
# (the convolutions on 15 replicas, the classifier from the first Linear on
# one, as in PipeDream's models/*/gpus=16/hybrid_conf.json), each compared
# with data parallelism, GPipe on the same stages and straight model
# parallelism. 1F1B runs twice: as the runtime runs it, and tuned
# (--defer-step --warmup-from-costs).
#
# Profiles: PipeDream's own (profiles/pipedream/<model>/graph.txt, V100;
# Inception-v3 with its branches collapsed), or in --profiles DIR
# DIR/<model>.profile.json, DIR/<model>/profile.json (`pipedream profile
# -o`) or DIR/<model>/graph.txt. AlexNet's graph.txt runs on synthetic data
# as in the paper: its input node (636 ms of loading per 256 images, 7.5
# times its compute) is set to 0 ms. Clusters: topology/clusters/<name>
# .cluster.json, and cluster-b-2x8, the paper's Cluster-B runs (2 servers
# of cluster-b's 4).
#
# Writes $out/$name.csv (a row per model, cluster and plan),
# $out/$name.md (the table), the raw --compare CSVs, plans and cluster
# files under $out/$name/ and, with gnuplot, $out/$name.png.
#
# Uses: pd (the program), src (the source tree), out, name, models,
# clusters, profiles (a directory or empty).

# The paper's configuration and speedup over data parallelism (Table 1,
# time to accuracy) for a model and cluster, or "- -". Only the image
# models of Table 1; the Cluster-B numbers are as recalled, to be checked
# against the paper before being quoted.
predicted_paper() {
    case "$1:$2" in
    vgg16:cluster-a) echo "15-1 5.28" ;;
    alexnet:cluster-a) echo "15-1 4.92" ;;
    resnet50:cluster-a) echo "16 1.00" ;;
    vgg16:cluster-b-2x8) echo "15-1 2.98" ;;
    alexnet:cluster-b-2x8) echo "15-1 2.04" ;;
    resnet50:cluster-b-2x8) echo "16 1.00" ;;
    *) echo "- -" ;;
    esac
}

# model -> "kind file batch": the model's profile (kind: graph or profile;
# batch 0 for a .profile.json, which holds its own), or nothing.
predicted_profile() {
    local m=$1 d f
    if [ -n "$profiles" ]; then
        for f in "$profiles/$m.profile.json" "$profiles/$m/profile.json"; do
            [ ! -r "$f" ] || { echo "profile $f 0"; return; }
        done
        d=$profiles/$m
    else
        d=$src/profiles/pipedream/$m
    fi
    f=$d/graph.txt
    [ ! -r "$d/graph_compressed.txt" ] || f=$d/graph_compressed.txt
    [ -r "$f" ] || return 0
    # The batch PipeDream profiled with (profiles/pipedream/README.md).
    case $m in
    alexnet | resnet18 | squeezenet1_0) echo "graph $f 256" ;;
    resnet101 | resnext101 | densenet121) echo "graph $f 64" ;;
    nasnetalarge) echo "graph $f 16" ;;
    gnmt | gnmt_large) echo "graph $f 32" ;;
    *) echo "graph $f 128" ;;
    esac
}

# cluster -> its .cluster.json (cluster-b-2x8 is written under $dir).
predicted_cluster() {
    local c=$1 f
    if [ "$c" = cluster-b-2x8 ]; then
        f=$dir/cluster-b-2x8.cluster.json
        sed 's/"name": "cluster-b"/"name": "cluster-b-2x8"/; /"network"/s/"fanout": 4/"fanout": 2/; s/"nodes": 4/"nodes": 2/' \
            "$src/topology/clusters/cluster-b.cluster.json" >"$f"
        grep -q '"fanout": 2' "$f" || { echo "cluster-b: no network level to shrink" >&2; return 1; }
    else
        f=$src/topology/clusters/$c.cluster.json
        [ -r "$f" ] || { echo "no cluster file $f" >&2; return 1; }
    fi
    echo "$f"
}

# A .cluster.json's shape: servers x workers per server.
predicted_shape() {
    awk '/"nodes":/ { gsub(/[^0-9]/, "", $2); n = $2 } /"workers_per_node":/ { gsub(/[^0-9]/, "", $2); w = $2 }
         END { print n "x" w }' "$1"
}

reproduce_predicted() {
    local dir=$out/$name csv=$out/$name.csv md=$out/$name.md model cluster file shape kind profile batch input
    local source sources plan raw spec width extra
    mkdir -p "$dir"
    # The paper's 15-1 (Table 1) for VGG16 and AlexNet, by graph.txt node.
    cat >"$dir/vgg16-15-1.plan.json" <<'JSON'
{"stages": [{"first_layer": "node2", "last_layer": "node34", "replicas": 15},
            {"first_layer": "node35", "last_layer": "node41", "replicas": 1}]}
JSON
    cat >"$dir/alexnet-15-1.plan.json" <<'JSON'
{"stages": [{"first_layer": "node2", "last_layer": "node17", "replicas": 15},
            {"first_layer": "node18", "last_layer": "node23", "replicas": 1}]}
JSON
    {
        printf "model,batch,cluster,servers_x_gpus,plan,config,predicted_ms,predicted_dp_ms,predicted_speedup,"
        printf "1f1b_ms,1f1b_tuned_ms,dp_ms,gpipe_ms,straight_ms,speedup_1f1b,speedup_1f1b_tuned,speedup_gpipe,"
        echo "paper_config,paper_speedup,pipedream_bytes_per_sample,dp_bytes_per_sample,comm_reduction"
    } >"$csv"
    for model in $models; do
        spec=$(predicted_profile "$model")
        if [ -z "$spec" ]; then
            echo "reproduce: no profile for $model; skipped" >&2
            continue
        fi
        read -r kind profile batch <<<"$spec"
        if [ "$kind" = graph ] && [ "$model" = alexnet ]; then
            # AlexNet on synthetic data: the input node loads nothing.
            mkdir -p "$dir/synthetic/alexnet"
            sed '/ -- Input -- /s/forward_compute_time=[0-9.]*/forward_compute_time=0.000/' \
                "$profile" >"$dir/synthetic/alexnet/graph.txt"
            profile=$dir/synthetic/alexnet/graph.txt
        fi
        if [ "$kind" = graph ]; then input=(--graph-txt "$profile" --batch-size "$batch"); else input=(--profile "$profile"); fi
        for cluster in $clusters; do
            file=$(predicted_cluster "$cluster") || return 1
            shape=$(predicted_shape "$file")
            sources="default pipedream"
            # The paper's 15-1 needs 16 workers and PipeDream's node names.
            [ "$kind" != graph ] || [ ! -r "$dir/$model-15-1.plan.json" ] ||
                [ $((${shape%x*} * ${shape#*x})) -ne 16 ] || sources="$sources paper"
            for source in $sources; do
                raw=$dir/$model-$cluster-$source
                case $source in
                paper) plan=(--plan "$dir/$model-15-1.plan.json") ;;
                *) plan=(--cost-model "$source") ;;
                esac
                "$pd" simulate --compare --csv "${input[@]}" --cluster "$file" "${plan[@]}" >"$raw.csv"
                "$pd" simulate --compare --csv "${input[@]}" --cluster "$file" "${plan[@]}" \
                    --defer-step --warmup-from-costs >"$raw-tuned.csv"
                # shellcheck disable=SC2046 # two words: config and speedup
                set -- $(predicted_paper "$model" "$cluster")
                awk -F, -v OFS=, -v model="$model" -v cluster="$cluster" -v shape="$shape" \
                    -v cost="$source" -v pconf="$1" -v pspeed="$2" -v tuned="$raw-tuned.csv" '
                    BEGIN { while ((getline line < tuned) > 0) { split(line, f, ","); if (f[6] == "pipedream") t = f[10] } }
                    NR == 2 { batch = $2 }
                    $6 == "pipedream" { conf = $7; pred = $8; pdp = $9; pipe = $10; pbytes = $13 }
                    $6 == "dp" { dp = $10; dbytes = $13 }
                    $6 == "gpipe" { gp = $10 }
                    $6 == "straight" { st = $10 }
                    END {
                        printf "%s,%s,%s,%s,%s,%s,%.3f,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%s,%s,%.0f,%.0f,%.2f\n",
                            model, batch, cluster, shape, cost, conf, pred, pdp, pdp / pred, pipe, t, dp, gp, st,
                            dp / pipe, dp / t, dp / gp, pconf, pspeed, pbytes, dbytes, (pbytes > 0 ? dbytes / pbytes : 0)
                    }' "$raw.csv" >>"$csv"
            done
        done
    done

    {
        printf "| model | cluster | plan | config | predicted ms/mb | predicted vs DP | simulated 1F1B vs DP "
        echo "| tuned 1F1B vs DP | GPipe vs DP | DP / 1F1B bytes | paper config | paper vs DP |"
        echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|"
        awk -F, 'NR > 1 {
            plan = $5 == "paper" ? "paper'"'"'s config" : $5 " model"
            printf "| %s | %s (%s) | %s | %s | %.1f | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %s | %s |\n",
                $1, $3, $4, plan, $6, $7, $9, $15, $16, $17, $22, $18, ($19 == "-" ? "-" : $19 "x")
        }' "$csv"
    } >"$md"
    cat "$md"

    if command -v gnuplot >/dev/null 2>&1; then
        # One group of bars per model and cluster: the simulated speedups of
        # both cost models' plans and of the paper's 15-1 (1F1B as run), and
        # the paper's measured one.
        awk -F, 'NR > 1 { k = $1 " " $3 }
                 NR > 1 && $5 == "default" { d[k] = $15; key[++n] = k; p[k] = ($19 == "-" ? "NaN" : $19) }
                 NR > 1 && $5 == "pipedream" { q[k] = $15 }
                 NR > 1 && $5 == "paper" { c[k] = $15 }
                 END { for (i = 1; i <= n; i++) { k = key[i]; split(k, a, " ")
                           printf "\"%s\\n%s\" %s %s %s %s\n", a[1], a[2], d[k], q[k], (k in c ? c[k] : "NaN"), p[k] } }' \
            "$csv" >"$dir/speedups.dat"
        # The paper's columns where there is something to draw (gnuplot
        # refuses a column without a point).
        extra=
        awk '$4 != "NaN" { f = 1 } END { exit !f }' "$dir/speedups.dat" &&
            extra="$extra, \"\" using 4 title \"simulated: the paper's 15-1\""
        awk '$5 != "NaN" { f = 1 } END { exit !f }' "$dir/speedups.dat" &&
            extra="$extra, \"\" using 5 title \"paper: measured (time to accuracy)\""
        # About 90 pixels per group, at least 1200.
        width=$(awk 'END { w = NR * 90; print (w < 1200 ? 1200 : w) }' "$dir/speedups.dat")
        cat >"$dir/speedups.gp" <<EOF
set terminal pngcairo size $width,560 font ",10" noenhanced
set bmargin 5
set output "$out/$name.png"
set title "PipeDream over data parallelism: simulated from the profiles vs the paper's measurements"
set ylabel "speedup over data parallelism"
$(reproduce_bar_style)
set key top right
set xtics nomirror
plot "$dir/speedups.dat" using 2:xtic(1) title "simulated: default cost model's plan", \\
     "" using 3 title "simulated: pipedream cost model's plan"$extra
EOF
        gnuplot "$dir/speedups.gp"
        echo "wrote $out/$name.png"
    fi
    echo "wrote $csv and $md"
}
