set terminal pngcairo size 800,500 noenhanced
set output 'experiments/verify/serving/fig7-throughput-vs-user.png'
set title 'aggregate throughput against per-user speed (Fig. 7)'
set xlabel 'per-user tok/s'
set ylabel 'aggregate tok/s'
set grid
set key outside right
$d0 << EOD
1 57.020 59.438 0.000
4 72.099 25.169 0.000
16 69.427 6.426 0.000
EOD
$d1 << EOD
1 32.150 33.442 0.978
4 35.523 9.443 0.978
16 30.794 2.144 0.978
EOD
$d2 << EOD
1 20.015 20.467 6.411
4 18.498 4.820 6.411
16 19.877 1.321 6.411
EOD
$d3 << EOD
1 34.032 34.893 0.718
4 39.151 11.272 0.000
16 37.171 2.735 0.000
EOD
$d4 << EOD
1 35.486 36.172 0.732
4 36.635 10.509 0.037
16 34.156 2.430 0.150
EOD
$d5 << EOD
1 30.252 31.101 1.859
4 34.803 9.052 1.786
16 30.462 2.078 2.177
EOD
$d6 << EOD
1 30.210 31.201 1.088
4 31.862 8.349 2.447
16 25.231 1.726 3.256
EOD
plot $d0 using 3:2 with linespoints lw 2 title 'autoregressive', $d1 using 3:2 with linespoints lw 2 title 'fixed {"length":1}', $d2 using 3:2 with linespoints lw 2 title 'fixed', $d3 using 3:2 with linespoints lw 2 title 'greedy', $d4 using 3:2 with linespoints lw 2 title 'async-topk', $d5 using 3:2 with linespoints lw 2 title 'bandit-ucb1 {"arms":[0,1,2,3,5,7]}', $d6 using 3:2 with linespoints lw 2 title 'hedge'
