set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/long/plots-4sh-t1/acceptance-0.png'
set title 'Acceptance per draft position: experiments/scale/long/traces/dspark-markov-4sh-t1.h5'
set xlabel 'draft position k'
set ylabel 'acceptance'
set grid
set yrange [0:1]
set xtics 1
plot 'experiments/scale/long/plots-4sh-t1/acceptance-0.dat' using 1:2 with linespoints title 'conditional', '' using 1:3 with linespoints title 'unconditional', '' using 1:4 with linespoints title 'analytic c*'
