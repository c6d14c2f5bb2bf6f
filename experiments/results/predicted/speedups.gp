set terminal pngcairo size 1800,560 font ",10" noenhanced
set bmargin 5
set output "experiments/results/predicted.png"
set title "PipeDream over data parallelism: simulated from the profiles vs the paper's measurements"
set ylabel "speedup over data parallelism"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key top right
set xtics nomirror
plot "experiments/results/predicted/speedups.dat" using 2:xtic(1) title "simulated: default cost model's plan", \
     "" using 3 title "simulated: pipedream cost model's plan", "" using 4 title "simulated: the paper's 15-1", "" using 5 title "paper: measured (time to accuracy)"
