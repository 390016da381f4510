set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/plots-t0/conditional-acceptance.png'
set title 'Conditional acceptance per draft position'
set xlabel 'draft position k'
set ylabel 'acceptance'
set yrange [0:1]
set xtics 1
set grid
set datafile missing '?'
plot 'experiments/scale/plots-t0/conditional-acceptance.dat' using 1:2 with linespoints title 'dflash-t0', 'experiments/scale/plots-t0/conditional-acceptance.dat' using 1:3 with linespoints title 'dspark-markov-t0', 'experiments/scale/plots-t0/conditional-acceptance.dat' using 1:4 with linespoints title 'dspark-rnn-t0'
