set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/long/plots/training-curve.png'
set title 'held-out tau proxy against supervised positions seen'
set xlabel 'supervised positions seen'
set ylabel 'tau proxy'
set grid
set key bottom right
set format x '%.1s%c'
$c0 << EOD
173854 1.16780
347068 1.29730
520462 1.36500
694459 1.42340
867817 1.44580
1041257 1.47330
EOD
$c1 << EOD
173854 1.25730
347068 1.40760
520462 1.50230
694459 1.58880
867817 1.66020
1041257 1.68380
EOD
plot $c0 using 1:2 with linespoints lw 2 title 'dflash', $c1 using 1:2 with linespoints lw 2 title 'dspark-markov'
