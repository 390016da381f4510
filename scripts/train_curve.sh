#!/bin/sh
# The training curve of one or more runs: held-out tau proxy (eval_log.jsonl) against supervised
# draft positions seen (the running sum of train_log.jsonl's "rows"), as a gnuplot PNG and a table.
#   sh scripts/train_curve.sh OUT.png RUN_DIR [RUN_DIR ...]
set -e
out=$1
shift
[ -n "$out" ] && [ $# -ge 1 ] || { echo "usage: sh scripts/train_curve.sh OUT.png RUN_DIR [RUN_DIR ...]" >&2; exit 1; }
tmp=$(mktemp -d)
plot=""
for run in "$@"; do
    name=$(basename "$run")
    [ -f "$run/train_log.jsonl" ] && [ -f "$run/eval_log.jsonl" ] || { echo "$run: no train_log.jsonl / eval_log.jsonl" >&2; exit 1; }
    # step -> cumulative rows, then the eval points at those steps
    awk -F'[:,}]' '{ for (i = 1; i < NF; i++) { if ($i ~ /"step"/) s = $(i+1) + 0; if ($i ~ /"rows"/) r = $(i+1) + 0 } cum += r; print s, cum }' \
        "$run/train_log.jsonl" > "$tmp/$name.rows"
    awk -F'[:,}]' 'NR == FNR { c[$1] = $2; next } { for (i = 1; i < NF; i++) { if ($i ~ /"step"/) s = $(i+1) + 0; if ($i ~ /"tau_proxy"/) t = $(i+1) + 0 } print c[s] + 0, t }' \
        FS=' ' "$tmp/$name.rows" FS='[:,}]' "$run/eval_log.jsonl" > "$tmp/$name.dat"
    echo "$name: positions seen, held-out tau proxy"
    cat "$tmp/$name.dat"
    plot="$plot${plot:+, }'$tmp/$name.dat' using (\$1/1000):2 with linespoints title '$name'"
done
gnuplot -e "set terminal pngcairo size 800,500; set output '$out'; set xlabel 'supervised draft positions seen (thousands)'; \
set ylabel 'held-out tau proxy'; set key bottom right; set grid; plot $plot"
rm -rf "$tmp"
echo "wrote $out"
