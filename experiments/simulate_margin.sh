#!/bin/sh
# How far the simulator's steady state is from the partitioner's predicted
# time per minibatch, on real inputs: nine of PipeDream's profiles
# (profiles/pipedream) on the five shipped cluster files, planned by both
# cost models, each plan simulated four ways (1F1B as the runtime runs it,
# with --defer-step, with --warmup-from-costs, with both). A ratio below 1
# means the simulator is faster than predicted. docs/simulator.md quotes
# the extremes.
#
# Usage: experiments/simulate_margin.sh
# Environment: PIPEDREAM (default: pipedream on PATH, else src/cli/pipedream),
# SRC (the source tree; default: this script's ..), OUT (default
# experiments/results). Writes $OUT/simulate_margin.csv and prints, per cost
# model and variant, the smallest and largest ratio.
set -eu
pd=${PIPEDREAM:-$(command -v pipedream || echo src/cli/pipedream)}
src=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
out=${OUT:-experiments/results}
mkdir -p "$out"
csv="$out/simulate_margin.csv"

echo "model,cluster,cost_model,config,predicted_ms,1f1b,defer_step,warmup_from_costs,both" >"$csv"
for m in vgg16:128 alexnet:256 resnet50:128 resnet18:256 squeezenet1_0:256 gnmt:32 gnmt_large:32 resnet101:64 \
    densenet121:64; do
    model=${m%:*} batch=${m#*:}
    for cluster in cluster-a cluster-b cluster-c dgx2 h200-ndr; do
        for cost in default pipedream; do
            row="$model,$cluster,$cost"
            for variant in "" "--defer-step" "--warmup-from-costs" "--defer-step --warmup-from-costs"; do
                # shellcheck disable=SC2086
                line=$("$pd" simulate --compare --csv --graph-txt "$src/profiles/pipedream/$model/graph.txt" \
                    --batch-size "$batch" --cluster "$src/topology/clusters/$cluster.cluster.json" \
                    --cost-model "$cost" $variant | awk -F, '$6 == "pipedream"')
                [ -n "$variant" ] || row="$row,$(echo "$line" | awk -F, '{ print $7 "," $8 }')"
                row="$row,$(echo "$line" | awk -F, '{ printf "%.4f", $10 / $8 }')"
            done
            echo "$row" >>"$csv"
        done
    done
done
awk -F, 'NR > 1 {
    for (i = 6; i <= 9; i++) {
        k = $3 " " i
        if (!(k in lo) || $i < lo[k]) { lo[k] = $i; wlo[k] = $1 " on " $2 }
        if (!(k in hi) || $i > hi[k]) { hi[k] = $i; whi[k] = $1 " on " $2 }
    }
}
END {
    split("1f1b defer-step warmup-from-costs both", name, " ")
    for (c = 1; c <= 2; c++) for (i = 6; i <= 9; i++) {
        k = (c == 1 ? "default" : "pipedream") " " i
        printf "%-9s %-18s simulated / predicted in [%.3f (%s), %.3f (%s)]\n", (c == 1 ? "default" : "pipedream"),
            name[i - 5], lo[k], wlo[k], hi[k], whi[k]
    }
}' "$csv"
echo "wrote $csv"
