set terminal pngcairo size 800,500 noenhanced
set output 'experiments/learned-heads/serving/fig8-verify-budget.png'
set title 'drafts verified per request per round (Fig. 8)'
set xlabel 'concurrency'
set ylabel 'verified drafts'
set grid
set key outside right
set logscale x 2
$d0 << EOD
1 60.158 61.572 0.000
4 104.529 34.654 0.000
EOD
$d1 << EOD
1 22.452 22.890 3.686
4 25.436 6.655 3.686
EOD
$d2 << EOD
1 28.258 28.590 1.019
4 30.069 7.829 0.058
EOD
plot $d0 using 1:4 with linespoints lw 2 title 'autoregressive', $d1 using 1:4 with linespoints lw 2 title 'fixed', $d2 using 1:4 with linespoints lw 2 title 'greedy'
