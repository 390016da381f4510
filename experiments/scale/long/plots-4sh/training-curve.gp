set terminal pngcairo size 800,500 noenhanced
set output 'experiments/scale/long/plots-4sh/training-curve.png'
set title 'held-out tau proxy against supervised positions seen'
set xlabel 'supervised positions seen'
set ylabel 'tau proxy'
set grid
set key bottom right
set format x '%.1s%c'
$c0 << EOD
174678 1.28260
348320 1.41800
521621 1.52140
695765 1.60490
870339 1.66400
1044049 1.69390
EOD
plot $c0 using 1:2 with linespoints lw 2 title 'dspark-markov-4sh'
