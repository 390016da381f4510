#!/bin/sh
# Issue 54, steps 3-4: the learned families trained for Qwen2.5-Coder-1.5B-Instruct (the real target)
# on one data cache, at one stated budget each, then their tau per domain and wall speedup under
# `greedy`. From the repository root; every stage resumes (the cache after its last indexed sequence,
# training from its last checkpoint, evaluation skips finished traces):
#
#   sh experiments/real-pair/train.sh cache     # the data cache: SHARDS x 50 training-mix prompts answered
#                                               # by the 1.5B (default 4 = 200 prompts, ~46k tokens, ~7 min)
#   sh experiments/real-pair/train.sh train     # each family STEPS steps (default 300) on it
#   sh experiments/real-pair/train.sh eval      # tau and speedup per domain at TEMPS = "0 1" under greedy (DFlash's
#                                               # chain, which has no confidences: fixed) (medusa, dflash,
#                                               # dspark-markov also as a best-first tree of TREE_NODES = 16,
#                                               # mtp and eagle3 as EAGLE-2's tree of 16)
#   ONLY="mtp eagle3" sh experiments/real-pair/train.sh train
#
# Needs ../shared/datasets (the training mix) and the model (`make model MODEL=qwen2.5-coder-1.5b`).
# The cache: the target's answers at Qwen's recommended sampling (T = 0.7, top-p 0.8, top-k 20), 256
# new tokens at most, its top-64 log-probabilities at every response position and its states at layers
# 1, 7, 13, 19, 25 (DSpark / DFlash's five taps over 28 layers), 1, 13, 25 (EAGLE-3's) and 27 (the last:
# Medusa, MTP), bf16, ~18 KB a token. The families share it and the training budget: STEPS steps of 4
# sequences x 32 anchors, the same supervised positions for every family.
# Measured (2-core Zen 4, 2026-11-28): one shard, 50 prompts, 11,407 tokens (7,701 generated) in 99 s:
# 115 tok/s, 78 generated/s, batch 16; 205 MB a shard (the whole mix, 27 shards: ~45 min, ~5.5 GB).
# Train + eval measured for MTP (2026-11-28, Zen 4): 300 steps in ~45 min (0.10-0.2 steps/s, other work beside
# it), evaluation ~8 min a family (two temperatures); the distilled LM (vanilla, 2 layers started from the
# target's first, with their biases) 300 steps in 1,859 s on a 2-core Xeon (0.16 steps/s), evaluation
# ~12 min; results in experiments/real-pair/report.md. Three times the data (2026-11-29, 2-core Xeon):
# SHARDS=12 adds 8 shards (400 prompts, 103k tokens) in 1,491 s (69 tok/s, 49 generated/s, batch 16), and
# Medusa at STEPS=1200 on the 12 shards trains in 1,458 s (0.82 steps/s): O=...-train12 keeps it apart. To keep
# checkpoints across sessions put O under ~/.cache (O=$HOME/.cache/dspark-bench/real-pair-train).
# The whole mix (2026-11-29, Xeon): SHARDS=27 adds the last 14.5 shards (709 prompts, 178k tokens, 127k
# generated) in 2,660 s (67 tok/s, 48 generated/s): 1,325 sequences, 334k tokens in all.
set -e
STAGE=${1:-all}
B=build/dspark-bench
E=experiments/real-pair
O=${O:-out/real-pair-train}
SHARDS=${SHARDS:-4}
STEPS=${STEPS:-300}
ONLY=${ONLY:-}
EVAL_N=${EVAL_N:-5}
TREE_NODES=${TREE_NODES:-16}
TEMPS=${TEMPS:-0 1}
# WARM=1: start from the weights of $O/runs/FAMILY/last (copied there from an earlier run) with a fresh
# schedule and moments (train.warm_start), on the same shards: a grown cache picks another draft
# vocabulary, whose hash the checkpoint refuses (so 12 -> 27 shards retrained from scratch)
WARM_KEY=""
[ "${WARM:-0}" = 1 ] && WARM_KEY=', "warm_start": true'
[ -x $B ] || make
python3 scripts/fetch_model.py qwen2.5-coder-1.5b
python3 scripts/fetch_model.py qwen2.5-coder-0.5b
mkdir -p $O
CACHE=${CACHE:-~/.cache/dspark-bench/train/qwen15-trainmix}
DATA="{\"dataset\": \"trainmix\", \"temperature\": 0.7, \"top_p\": 0.8, \"top_k\": 20, \"max_new_tokens\": 256,
  \"max_prompt\": 384, \"target_top_k\": 64, \"batch\": 16, \"shard_size\": 50, \"seed\": 1,
  \"taps\": [1, 7, 13, 19, 25, 27], \"cache\": \"$CACHE\"}"
# family|drafter object (DSpark / DFlash: Qwen's token 16 is the digit 1, so their mask token is a
# padding row of the embedding, 151935, which no text uses)
families() {
    echo "mtp|{\"name\": \"mtp\", \"depth\": 4, \"draft_vocab\": 32768}"
    echo "eagle3|{\"name\": \"eagle3\", \"depth\": 4, \"draft_vocab\": 32768}"
    echo "medusa|{\"name\": \"medusa\", \"heads\": 4, \"draft_vocab\": 32768}"
    echo "dspark-markov|{\"name\": \"dspark-markov\", \"gamma\": 4, \"layers\": 2, \"mask_token\": 151935, \"draft_vocab\": 32768}"
    echo "dflash|{\"name\": \"dflash\", \"gamma\": 4, \"layers\": 2, \"mask_token\": 151935, \"draft_vocab\": 32768}"
    echo "vanilla|{\"name\": \"vanilla\", \"n_layers\": 2, \"draft_vocab\": 32768}"
}
config() { # family drafter-object -> $O/train-FAMILY.json
    cat > $O/train-$1.json <<JSON
{"comment": "experiments/real-pair/train.sh: $1 for the 1.5B", "target": "qwen2.5-coder-1.5b", "drafter": $2,
 "data": $DATA,
 "train": {"steps": $STEPS, "seqs_per_step": 4, "anchors": 32, "lr": 6e-4, "warmup_frac": 0.04, "eval_every": 50,
           "ckpt_every": 50, "holdout": 0.05, "eval_seqs": 20, "seed": 1$WARM_KEY},
 "out": "$O/runs/$1"}
JSON
}
families | while IFS='|' read f dj; do config "$f" "$dj"; done
if [ "$STAGE" = cache ] || [ "$STAGE" = all ]; then
    echo "train.sh: data cache, $SHARDS shards of 50 prompts ($(date +%H:%M:%S))"
    $B train --config $O/train-mtp.json --data-only --max-shards $SHARDS
fi
if [ "$STAGE" = train ] || [ "$STAGE" = all ]; then
    families | while IFS='|' read f dj; do
        case " ${ONLY:-$f} " in *" $f "*) ;; *) continue ;; esac
        echo "train.sh: $f, $STEPS steps ($(date +%H:%M:%S))"
        $B train --config $O/train-$f.json --max-shards $SHARDS
    done
fi
if [ "$STAGE" = eval ] || [ "$STAGE" = all ]; then
    [ -f $O/sps.json ] || $B bench-target --model qwen2.5-coder-1.5b --max-B 16 --context2 0 --reps 9 --out $O/sps.json > $O/sps.txt
    # the reference the learned heads are measured against (issue 54: "a learned head above the 0.5B"):
    # the 0.5B sibling as run.sh's default (draft_lookup, greedy, gamma 8) on the same prompts and protocol
    case " ${ONLY:-sibling} " in *" sibling "*)
        for T in $TEMPS; do
            tag=sibling-0.5b-t$T
            [ -f $O/$tag.h5 ] && continue
            echo "train.sh: eval $tag ($(date +%H:%M:%S))"
            cat > $O/eval-$tag.json <<JSON
{"comment": "experiments/real-pair/train.sh: the 0.5B sibling draft (lookup, greedy) on the heads' prompts",
 "target": "qwen2.5-coder-1.5b", "drafter": {"name": "vanilla", "model": "qwen2.5-coder-0.5b", "draft_lookup": 6},
 "scheduler": "greedy", "gamma": 8, "sps": "$O/sps.json", "datasets": ["gsm8k", "humaneval", "mtbench"],
 "limit": $EVAL_N, "temperature": $T, "seed": 1, "max_new_tokens": 128, "out": "$O/$tag.h5"}
JSON
            $B run --config $O/eval-$tag.json > $O/$tag.txt
            $B report $O/$tag.h5 --out $O/$tag.md > /dev/null
        done ;;
    esac
    families | while IFS='|' read f dj; do
        case " ${ONLY:-$f} " in *" $f "*) ;; *) continue ;; esac
        [ -d $O/runs/$f/last ] || { echo "train.sh: no checkpoint for $f (train it first)"; continue; }
        # a chain, and for the families with a tree mode (issue 55) a best-first tree of TREE_NODES nodes
        tree=""
        case $f in medusa|dflash|dspark-markov|mtp|eagle3) tree="-tree$TREE_NODES" ;; esac
        for T in $TEMPS; do for shape in "" $tree; do
            tag=$f$shape-t$T
            [ -f $O/$tag.h5 ] && continue
            extra=""
            [ -n "$shape" ] && extra=", \"tree_nodes\": $TREE_NODES"
            echo "train.sh: eval $tag ($(date +%H:%M:%S))"
            # greedy prices drafts by their confidences; DFlash's chain has none (its tree's nodes carry their
            # path probabilities), so it runs under fixed
            sched=greedy
            [ "$f" = dflash ] && [ -z "$shape" ] && sched=fixed
            cat > $O/eval-$tag.json <<JSON
{"comment": "experiments/real-pair/train.sh: $f$shape for the 1.5B, $sched, the AR baseline alternating",
 "target": "qwen2.5-coder-1.5b", "drafter": {"name": "$f", "checkpoint": "$O/runs/$f/last"$extra},
 "scheduler": "$sched", "gamma": 4, "sps": "$O/sps.json", "datasets": ["gsm8k", "humaneval", "mtbench"],
 "limit": $EVAL_N, "temperature": $T, "seed": 1, "max_new_tokens": 128, "out": "$O/$tag.h5"}
JSON
            $B run --config $O/eval-$tag.json > $O/$tag.txt
            $B report $O/$tag.h5 --out $O/$tag.md > /dev/null
        done; done
    done
fi
