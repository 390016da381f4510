set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/long/plots-t1/conditional-acceptance.png'
set title 'Conditional acceptance per draft position'
set xlabel 'draft position k'
set ylabel 'acceptance'
set grid
set yrange [0:1]
set xtics 1
set datafile missing '?'
plot 'experiments/scale/long/plots-t1/conditional-acceptance.dat' using 1:2 with linespoints title 'dflash-t1', 'experiments/scale/long/plots-t1/conditional-acceptance.dat' using 1:3 with linespoints title 'dspark-markov-t1'
