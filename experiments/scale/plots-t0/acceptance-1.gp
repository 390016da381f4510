set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/plots-t0/acceptance-1.png'
set title 'Acceptance per draft position: experiments/scale/traces/dspark-markov-t0.h5'
set xlabel 'draft position k'
set ylabel 'acceptance'
set yrange [0:1]
set xtics 1
set grid
plot 'experiments/scale/plots-t0/acceptance-1.dat' using 1:2 with linespoints title 'conditional', '' using 1:3 with linespoints title 'unconditional', '' using 1:4 with linespoints title 'analytic c*'
