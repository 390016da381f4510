set terminal pngcairo size 800,500 noenhanced
set output 'experiments/verify/serving-avx512/fig8-throughput.png'
set title 'aggregate throughput (Fig. 8)'
set xlabel 'concurrency'
set ylabel 'aggregate tok/s'
set grid
set key outside right
set logscale x 2
$d0 << EOD
1 123.719 129.196 0.000
4 158.478 54.022 0.000
16 130.610 11.929 0.000
EOD
$d1 << EOD
1 79.584 81.563 0.979
4 82.804 21.654 0.979
16 69.609 4.937 0.979
EOD
$d2 << EOD
1 44.793 45.455 6.411
4 38.113 10.076 6.411
16 42.425 2.914 6.411
EOD
$d3 << EOD
1 78.958 80.464 0.133
4 85.476 25.050 0.000
16 95.409 7.247 0.000
EOD
$d4 << EOD
1 75.789 77.090 0.135
4 84.701 24.540 0.037
16 89.131 6.431 0.150
EOD
$d5 << EOD
1 69.408 70.930 1.872
4 63.410 17.090 1.656
16 73.157 5.074 1.948
EOD
$d6 << EOD
1 75.051 76.312 0.841
4 76.496 20.374 0.262
16 89.903 6.474 0.258
EOD
plot $d0 using 1:2 with linespoints lw 2 title 'autoregressive', $d1 using 1:2 with linespoints lw 2 title 'fixed {"length":1}', $d2 using 1:2 with linespoints lw 2 title 'fixed', $d3 using 1:2 with linespoints lw 2 title 'greedy', $d4 using 1:2 with linespoints lw 2 title 'async-topk', $d5 using 1:2 with linespoints lw 2 title 'bandit-ucb1 {"arms":[0,1,2,3,5,7]}', $d6 using 1:2 with linespoints lw 2 title 'hedge'
