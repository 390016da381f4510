set terminal pngcairo size 800,500 noenhanced
set output 'experiments/verify/serving-open/fig7-throughput-vs-user.png'
set title 'aggregate throughput against per-user speed (Fig. 7)'
set xlabel 'per-user tok/s'
set ylabel 'aggregate tok/s'
set grid
set key outside right
$d0 << EOD
0.5 22.264 110.445 0.000
1 44.326 105.269 0.000
2 87.904 86.581 0.000
4 111.675 9.402 0.000
EOD
$d1 << EOD
0.5 22.180 66.001 0.979
1 43.972 54.993 0.979
2 74.711 11.553 0.979
4 69.088 5.433 0.979
EOD
$d2 << EOD
0.5 22.181 67.178 0.100
1 44.042 55.837 0.082
2 80.657 13.728 0.013
4 69.609 4.942 0.011
EOD
$d3 << EOD
0.5 22.165 59.123 0.682
1 43.976 49.040 0.564
2 74.568 10.376 0.270
4 71.047 2.975 0.288
EOD
plot $d0 using 3:2 with linespoints lw 2 title 'autoregressive', $d1 using 3:2 with linespoints lw 2 title 'fixed {"length":1}', $d2 using 3:2 with linespoints lw 2 title 'greedy', $d3 using 3:2 with linespoints lw 2 title 'hedge'
