#!/bin/sh
# Issue 55 step 4: block verification (Sun et al. 2024) against token-wise verification on the same
# prompts at T = 1, on the real pair (Qwen2.5-Coder-1.5B-Instruct target, its 0.5B sibling as the
# draft model) and on SmolLM2 (a self-draft of its first 20 layers). One command from the repository
# root, resumable (a finished run is skipped; rm -r out/block-verify to redo), ~22 min on a 2-core Xeon:
#
#   sh experiments/block-verify/run.sh
#   CODE=4 SB=2 sh experiments/block-verify/run.sh   # more prompts
#
# Each configuration runs twice on the same prompts and seeds, once per rule (`--verifier token`,
# `--verifier block`), both with `--compare-verifiers`: every sampled chain round also computes both
# rules' expected accepted drafts on that very round's drafts (no sampling noise between the rules;
# it costs a few passes over the vocabulary a draft, in both runs alike, so the wall figures compare
# the rules with each other, not with llama.cpp). Nothing else may run beside it (wall times).
# Needs `make model MODEL=qwen2.5-coder-1.5b` and `MODEL=qwen2.5-coder-0.5b` (fetched when missing).
set -e
B=build/dspark-bench
O=${O:-out/block-verify}
CODE=${CODE:-2}
SB=${SB:-1}
TGT=qwen2.5-coder-1.5b
DFT=qwen2.5-coder-0.5b
[ -x $B ] || make
for m in $TGT $DFT; do python3 scripts/fetch_model.py $m; done
make model > /dev/null
mkdir -p $O
[ -f $O/sps-qwen.json ] || $B bench-target --model $TGT --max-B 16 --context2 0 --reps 9 --out $O/sps-qwen.json > /dev/null
[ -f $O/sps-smol.json ] || $B bench-target --max-B 16 --reps 9 --out $O/sps-smol.json > /dev/null
CODESETS='["humaneval", "mbpp"]'
SBSETS='["sbmini-mt", "sbmini-trans", "sbmini-sum", "sbmini-qa", "sbmini-math", "sbmini-rag"]'
# name|target|drafter object|scheduler|gamma|datasets|limit|sps
configs() {
    echo "qwen-0.5b-fixed4-code|$TGT|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|fixed|4|$CODESETS|$CODE|sps-qwen"
    echo "qwen-0.5b-fixed8-code|$TGT|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|fixed|8|$CODESETS|$CODE|sps-qwen"
    echo "qwen-0.5b-greedy-code|$TGT|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|greedy|8|$CODESETS|$CODE|sps-qwen"
    echo "qwen-0.5b-fixed4-sb|$TGT|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|fixed|4|$SBSETS|$SB|sps-qwen"
    echo "smol-self20-fixed4-sb|smollm2-135m|{\"name\": \"vanilla\", \"layers\": 20}|fixed|4|$SBSETS|$SB|sps-smol"
    # the same on 8 prompts a category: at ~5 % acceptance a 1-prompt run's paired estimate is noisy
    echo "smol-self20-fixed4-sb8|smollm2-135m|{\"name\": \"vanilla\", \"layers\": 20}|fixed|4|$SBSETS|8|sps-smol"
}
configs | while IFS='|' read name tgt dj sched gamma ds lim sps; do
    for rule in token block; do
        tag=$name-$rule
        [ -f $O/$tag.done ] && { echo "run.sh: $tag done (skipped)"; continue; }
        cat > $O/$tag.json <<JSON
{"comment": "experiments/block-verify/run.sh: $tag", "target": "$tgt", "drafter": $dj, "scheduler": "$sched",
 "gamma": $gamma, "datasets": $ds, "limit": $lim, "temperature": 1, "max_new_tokens": 128, "seed": 1,
 "verifier": "$rule", "compare_verifiers": true, "sps": "$O/$sps.json", "out": "$O/$tag.h5"}
JSON
        echo "run.sh: $tag ($(date +%H:%M:%S))"
        $B run --config $O/$tag.json > $O/$tag.txt
        touch $O/$tag.done
    done
done
# summary: realised tokens a round and acceptance per rule, the paired expectations, wall speedups
{
    echo "# Block vs token-wise verification, T = 1 ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores)"
    echo
    echo "Same prompts and seeds per pair of rows. E[acc] token / block: both rules' expected accepted drafts a"
    echo "round on the same drafts (every sampled chain round of that run). tau: tokens a target step realised."
    echo
    echo "| configuration | rule | rounds compared | E[acc] token | E[acc] block | block gain | tau realised | acceptance | wall speedup vs AR |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    configs | while IFS='|' read name tgt dj sched gamma ds lim sps; do
        for rule in token block; do
            f=$O/$name-$rule.txt
            [ -f $f ] || continue
            line=$(grep '^chain rules' $f || true)
            n=$(echo "$line" | sed -n 's/.*(\([0-9]*\) sampled rounds.*/\1/p')
            et=$(echo "$line" | sed -n 's/.*token-wise \([0-9.]*\),.*/\1/p')
            eb=$(echo "$line" | sed -n 's/.*block \([0-9.]*\) (.*/\1/p')
            gain=$(echo "$line" | sed -n 's/.*(\([-+0-9.]*%\)).*/\1/p')
            tau=$(sed -n 's/^speculative:.* tau \([0-9.]*\),.*/\1/p' $f)
            acc=$(sed -n 's/^speculative:.* acceptance \([0-9.]*\);.*/\1/p' $f)
            wall=$(sed -n 's/^wall speedup over the autoregressive baseline: \([0-9.]*x\).*/\1/p' $f)
            echo "| $name | $rule | $n | $et | $eb | $gain | $tau | $acc | $wall |"
        done
    done
} > $O/summary.md
cat $O/summary.md
