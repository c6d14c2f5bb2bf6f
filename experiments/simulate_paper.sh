#!/bin/sh
# docs/simulator.md's table of predicted speedups: VGG16, AlexNet and
# ResNet-50 from PipeDream's V100 profiles on Cluster-A, the paper's 2x8
# Cluster-B and the 4x8 cluster-b file, as `experiments/reproduce
# --predicted` makes it (experiments/lib/predicted.sh has the details).
#
# Usage: experiments/simulate_paper.sh
# Environment: PIPEDREAM (the program; default: pipedream on PATH, else
# src/cli/pipedream under the current directory), OUT (default
# experiments/results).
# Writes $OUT/simulate_paper.csv, $OUT/simulate_paper.md, the raw
# --compare CSVs under $OUT/simulate_paper/ and, with gnuplot,
# $OUT/simulate_paper.png.
exec "$(dirname "$0")/reproduce" --predicted --out "${OUT:-experiments/results}" --name simulate_paper \
    --models "vgg16 alexnet resnet50" --clusters "cluster-a cluster-b-2x8 cluster-b"
