set terminal pngcairo size 900,520 font ",10"
set output "/work/main/experiments/results/emulated/throughput.png"
set title "PipeDream vs data parallelism on 4 emulated hosts, 100Mb/s links"
set ylabel "samples/s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key top left
plot "/work/main/experiments/results/emulated/throughput.dat" using 2:xtic(1) title "PipeDream (measured)", "" using 3 title "DP (measured)", \
     "" using 6 title "PipeDream (predicted, compute x2)", "" using 7 title "DP (predicted, compute x2)"
set output "/work/main/experiments/results/emulated/accuracy.png"
set title "Test accuracy against wall time (Fashion-MNIST, 1000 test samples)"
set xlabel "seconds of training"
set ylabel "test accuracy (%)"
unset style
set style data linespoints
set key bottom right
set yrange [0:100]
plot "/work/main/experiments/results/emulated/accuracy-vgg16-pipedream.dat" using 1:2 with linespoints title "vgg16 pipedream", "/work/main/experiments/results/emulated/accuracy-vgg16-dp.dat" using 1:2 with linespoints title "vgg16 dp", "/work/main/experiments/results/emulated/accuracy-alexnet-pipedream.dat" using 1:2 with linespoints title "alexnet pipedream", "/work/main/experiments/results/emulated/accuracy-alexnet-dp.dat" using 1:2 with linespoints title "alexnet dp"
