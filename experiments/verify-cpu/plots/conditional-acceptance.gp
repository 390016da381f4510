set terminal pngcairo size 800,500 noenhanced
set output 'experiments/verify-cpu/plots/conditional-acceptance.png'
set title 'Conditional acceptance per draft position'
set xlabel 'draft position k'
set ylabel 'acceptance'
set yrange [0:1]
set xtics 1
set grid
set datafile missing '?'
plot 'experiments/verify-cpu/plots/conditional-acceptance.dat' using 1:2 with linespoints title 'k4_t0', 'experiments/verify-cpu/plots/conditional-acceptance.dat' using 1:3 with linespoints title 'k4_t1', 'experiments/verify-cpu/plots/conditional-acceptance.dat' using 1:4 with linespoints title 'k27_t0', 'experiments/verify-cpu/plots/conditional-acceptance.dat' using 1:5 with linespoints title 'k27_t1'
