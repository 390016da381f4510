#!/bin/sh
# Issue 28's results: the training-free drafters on Spec-Bench's six categories, one command from the
# repository root (resumable: a finished configuration is skipped; rm -r out/training-free to redo).
#
#   sh experiments/training-free/run.sh            # ~5 min on a 2-core AVX-512 Xeon (nothing else may run: wall time)
#   LIMIT=10 sh experiments/training-free/run.sh   # the issue's 10 prompts a category (~10 min there; ~25 min before issue 29)
#
# 1. this machine's SPS(B) table (bench-target, ~15 s): what the greedy scheduler prices drafts with
# 2. per configuration one `run` over sb-mt (both turns), sb-trans, sb-sum, sb-qa, sb-math, sb-rag,
#    LIMIT prompts each, temperature 0, 128 new tokens, the autoregressive baseline alternating with
#    the speculative run in the same process (every output must equal the baseline's)
# 3. report per configuration, then summary.md: decode and wall speedup per category and macro
set -e
B=build/dspark-bench
O=out/training-free
LIMIT=${LIMIT:-5}
[ -x $B ] || make
. scripts/specbench_lib.sh
mkdir -p $O
[ -f $O/sps.json ] || $B bench-target --max-B 16 --reps 9 --out $O/sps.json > $O/sps.txt
# name drafter scheduler gamma
CONFIGS="ngram-greedy:ngram:greedy:8
suffix-greedy:suffix:greedy:8
ngram-fixed1:ngram:fixed:1
suffix-fixed1:suffix:fixed:1
ngram-fixed4:ngram:fixed:4
selfdraft-fixed1:vanilla27:fixed:1"
echo "$CONFIGS" | while IFS=: read name drafter sched gamma; do
    [ -f $O/$name.done ] && { echo "run.sh: $name done (skipped)"; continue; }
    case $drafter in
        vanilla27) dj='{"name": "vanilla", "layers": 27}'; lim=$(( LIMIT < 2 ? LIMIT : 2 )) ;;
        *) dj="{\"name\": \"$drafter\"}"; lim=$LIMIT ;;
    esac
    cat > $O/$name.json <<JSON
{"comment": "experiments/training-free/run.sh: $name", "drafter": $dj, "scheduler": "$sched", "gamma": $gamma,
 "datasets": ["sb-mt", "sb-trans", "sb-sum", "sb-qa", "sb-math", "sb-rag"], "limit": $lim,
 "temperature": 0, "max_new_tokens": 128, "seed": 1, "sps": "$O/sps.json", "out": "$O/$name.h5"}
JSON
    echo "run.sh: $name ($(date +%H:%M:%S))"
    $B run --config $O/$name.json > $O/$name.txt
    $B report $O/$name.h5 --out $O/$name.md --json $O/$name.metrics.json > /dev/null
    touch $O/$name.done
done
# summary: one row per configuration, the decode speedup per category (wall speedup in brackets)
S=$O/summary.md
{
    echo "# Training-free drafters on Spec-Bench (temperature 0, 128 new tokens)"
    echo
    grep -m1 "kernels:" $O/sps.txt || true
    echo
    echo "Decode speedup over autoregression in the same process (prefill excluded), wall speedup (prefill included) in brackets; tau = tokens per round; macro = mean over the six categories."
    echo
    echo "| configuration | sb-mt | sb-trans | sb-sum | sb-qa | sb-math | sb-rag | macro | tau (all) | outputs identical |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    echo "$CONFIGS" | while IFS=: read name drafter sched gamma; do
        [ -f $O/$name.done ] || continue
        spec_row "$name" $name dec-wall
    done
    echo
    sps_block
} > $S
cat $S
