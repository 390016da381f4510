#!/bin/sh
# Issue 54, step 2: speculation on the real pair (Qwen2.5-Coder-1.5B-Instruct Q4_K_M as the target,
# its 0.5B sibling as a draft model) beside llama.cpp's own speculative decoding with the same two
# files. One command from the repository root, resumable (a finished configuration is skipped;
# rm -r out/real-pair to redo):
#
#   sh experiments/real-pair/run.sh                 # ~80 min on a 2-core Zen 4 (the defaults below)
#   CODE=6 SB=2 sh experiments/real-pair/run.sh     # more prompts (about twice that)
#   ONLY="vanilla-greedy ngram-greedy" TEMPS=0 sh experiments/real-pair/run.sh   # a subset
#   LLAMA=0 sh experiments/real-pair/run.sh         # without the llama.cpp side
#   SETS=sb sh experiments/real-pair/run.sh         # Spec-Bench only (SETS=code: HumanEval + MBPP only)
#   ISA=avx512-vnni sh experiments/real-pair/run.sh # a kernel path other than the best this CPU runs
#
# Needs the two models (`make model MODEL=qwen2.5-coder-1.5b`, `MODEL=qwen2.5-coder-0.5b`: fetched
# here when missing, ~1.6 GB) and, for the peer, llama.cpp's llama-speculative and llama-lookup
# (scripts/build_llamacpp.sh builds them, ~10 min the first time; LLAMA_BIN=DIR uses built ones).
# Nothing else may run beside it (wall times). Steps:
# 1. the target's SPS(B) table on this machine (bench-target, ~1 min): what `greedy` prices with
# 2. per configuration and temperature two `run`s: the code group (HumanEval and MBPP, the DeepSpec
#    prompt files, CODE prompts each) and Spec-Bench (the six categories bundled as sbmini-*, SB
#    prompts each), 128 new tokens; the autoregressive baseline alternates with the speculative run
#    prompt by prompt in the same process (T = 0: outputs must equal the baseline's). Drafters: the
#    0.5B draft model (`vanilla`; also over a 32k draft vocabulary, and with draft_lookup: its own
#    chain sped by prompt lookup), ngram, suffix, recycling and combine, each under fixed and greedy
#    at T = 0 and under greedy at T = 1 (TEMPS, ONLY select)
# 3. after each temperature's runs, llama.cpp on the same rendered prompts (token counts checked equal): its autoregression
#    (llama-lookup with no drafts), llama-speculative with the 0.5B at its default draft length (3)
#    and at 6, same temperatures, same threads
# 4. summary.md: per configuration and group wall and decode tokens/s, speedups over the same tool's
#    autoregression, tokens per target step, acceptance per position, draft and verify shares.
set -e
B=build/dspark-bench
O=${O:-out/real-pair}
CODE=${CODE:-2}
SB=${SB:-1}
TEMPS=${TEMPS:-0 1}
ONLY=${ONLY:-}
LLAMA=${LLAMA:-1}
T=${THREADS:-2}
ISA=${ISA:-auto} # the CPU kernel path (ISA=avx512-vnni: without the AMX tiles on a machine that has them)
# SETS=sb: Spec-Bench only. Not GROUPS (its name until 2026-12-02): bash keeps GROUPS for the user's
# group ids and drops `GROUPS=sb sh run.sh` without a word, so every set ran
case "${GROUPS:-}" in code | sb | "code sb" | "sb code") # the old name, passed from a shell that keeps it (dash)
    echo "run.sh: GROUPS is now SETS (SETS=${GROUPS}): bash drops GROUPS from a command's environment" >&2; exit 2 ;;
esac
SETS_=${SETS:-code sb}
for g in $SETS_; do
    case $g in code | sb) ;; *) echo "run.sh: SETS: '$g' is not one of: code sb" >&2; exit 2 ;; esac
done
TGT=qwen2.5-coder-1.5b
DFT=qwen2.5-coder-0.5b
[ -x $B ] || make
for m in $TGT $DFT; do python3 scripts/fetch_model.py $m; done # quick when the checked file is there
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/dspark-bench
TGT_PATH=$CACHE/$(python3 scripts/fetch_model.py --list | awk -v m=$TGT '$1 == m { print $2 }')
DFT_PATH=$CACHE/$(python3 scripts/fetch_model.py --list | awk -v m=$DFT '$1 == m { print $2 }')
mkdir -p $O
[ -f $O/sps.json ] || $B bench-target --model $TGT --threads $T --isa $ISA --max-B ${SPS_MAX_B:-24} --context2 0 --reps 9 --out $O/sps.json > $O/sps.txt
if [ "$LLAMA" = 1 ]; then
    BIN=${LLAMA_BIN:-}
    [ -n "$BIN" ] || BIN=$(scripts/build_llamacpp.sh llama-speculative llama-lookup | tail -n 1)
fi
COMBINE='{"name": "combine", "members": [{"name": "ngram"}, {"name": "suffix"}, {"name": "recycling"}]}'
# name|drafter object|scheduler|gamma|temperatures
configs() {
    echo "vanilla-fixed|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|fixed|4|0"
    echo "vanilla-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\"}|greedy|8|0 1"
    echo "vanilla-q5head-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"head_type\": \"q5_0\"}|greedy|8|0 1"
    # the 0.5B over its head's first 32,768 ids by merge rank, and the draft LM speculating its own
    # chain with up to 6 prompt-lookup tokens a forward (the same drafts, fewer forwards), over that
    # vocabulary and over the whole one, every looked-up token fed (cost 0) or as many as their running
    # hit rate pays for (the default)
    echo "vanilla-dv32k-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_vocab\": 32768}|greedy|8|0 1"
    echo "vanilla-lookup-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_vocab\": 32768, \"draft_lookup\": 6, \"draft_lookup_cost\": 0}|greedy|8|0 1"
    echo "vanilla-lookupfull-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"draft_lookup_cost\": 0}|greedy|8|0 1"
    echo "vanilla-lookupadapt-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6}|greedy|8|0 1"
    # the same with a sibling beside each draft (the row's next best token at T = 0, a draw without
    # replacement at T = 1): a tree of 16 nodes, the chain to depth 8, priced node by node by greedy
    echo "vanilla-lookupadapt-tree16-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"tree_nodes\": 16}|greedy|16|0 1"
    # its lookup and the head re-quantized to Q5_0, a chain: the tree row below without its siblings
    echo "vanilla-lookup-q5head-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"head_type\": \"q5_0\"}|greedy|8|0 1"
    # every lever of the 0.5B at once: its lookup, the sibling tree of 16 and its head re-quantized
    # to Q5_0 at load (the file's Q8_0 head is a third of its bytes a draft)
    echo "vanilla-best-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"tree_nodes\": 16, \"head_type\": \"q5_0\"}|greedy|16|0 1"
    # ... with its head over the first 32,768 ids by merge rank (draft_vocab): a fifth of the head's bytes
    echo "vanilla-best32k-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"tree_nodes\": 16, \"head_type\": \"q5_0\", \"draft_vocab\": 32768}|greedy|16|0 1"
    # ... reading only the prompt's first 4 and last 256 tokens (draft_window): its own prefill of
    # Spec-Bench's ~750-token summaries and RAG contexts is a cost the autoregressive run never pays
    echo "vanilla-best-w256-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6, \"tree_nodes\": 16, \"head_type\": \"q5_0\", \"draft_window\": 256}|greedy|16|0 1"
    # a tree the 0.5B grows itself (EAGLE-2's expansion: 2 nodes a level fed in one forward, their 2 best
    # tokens as children, 8 levels, the 16 best nodes priced by greedy), beside the same head as a chain
    # and with siblings only (no lookup in any of the three: the dynamic tree feeds its own rows)
    echo "vanilla-q5head-tree16-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"tree_nodes\": 16, \"head_type\": \"q5_0\"}|greedy|16|0 1"
    echo "vanilla-dyn16-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"tree_mode\": \"dynamic\", \"tree_nodes\": 16, \"tree_depth\": 8, \"head_type\": \"q5_0\"}|greedy|16|0 1"
    # the same grown at T = 1 with children drawn without replacement: every node whose path probability
    # reaches 1/8 (64 nodes' room), so a tree that follows the rows yet keeps each node's place free of its token
    echo "vanilla-dyn64-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"tree_mode\": \"dynamic\", \"tree_nodes\": 64, \"tree_depth\": 8, \"head_type\": \"q5_0\"}|greedy|64|1"
    echo "vanilla-dyn16w3-greedy|{\"name\": \"vanilla\", \"model\": \"$DFT\", \"tree_mode\": \"dynamic\", \"tree_nodes\": 16, \"tree_width\": 3, \"tree_depth\": 8, \"head_type\": \"q5_0\"}|greedy|16|0 1"
    for d in ngram suffix recycling; do
        echo "$d-fixed|{\"name\": \"$d\"}|fixed|8|0"
        echo "$d-greedy|{\"name\": \"$d\"}|greedy|8|0 1"
    done
    echo "combine-fixed|$COMBINE|fixed|8|0"
    echo "combine-greedy|$COMBINE|greedy|8|0 1"
    # the 0.5B (with its lookup) beside suffix: a round takes suffix's free draft where its expected
    # accepted length beats the 0.5B's estimate (long copies), the 0.5B's otherwise
    echo "combine-0.5b-suffix-greedy|{\"name\": \"combine\", \"members\": [{\"name\": \"vanilla\", \"model\": \"$DFT\", \"draft_lookup\": 6}, {\"name\": \"suffix\"}]}|greedy|8|0 1"
}
sets() {
    case $1 in
    code) echo '["humaneval", "mbpp"]|'$CODE ;;
    sb) echo '["sbmini-mt", "sbmini-trans", "sbmini-sum", "sbmini-qa", "sbmini-math", "sbmini-rag"]|'$SB ;;
    esac
}
for Tm in $TEMPS; do
    configs | while IFS='|' read name dj sched gamma temps; do
        case " $temps " in *" $Tm "*) ;; *) continue ;; esac
        case " ${ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
        for g in $SETS_; do
            tag=$name-t$Tm-$g
            [ -f $O/$tag.done ] && { echo "run.sh: $tag done (skipped)"; continue; }
            ds=$(sets $g | cut -d'|' -f1)
            lim=$(sets $g | cut -d'|' -f2)
            cat > $O/$tag.json <<JSON
{"comment": "experiments/real-pair/run.sh: $tag", "target": "$TGT", "drafter": $dj, "scheduler": "$sched",
 "gamma": $gamma, "datasets": $ds, "limit": $lim, "temperature": $Tm, "max_new_tokens": 128, "seed": 1,
 "threads": $T, "isa": "$ISA", "sps": "$O/sps.json", "out": "$O/$tag.h5", "prompts_out": "$O/prompts-t$Tm-$g.jsonl"}
JSON
            echo "run.sh: $tag ($(date +%H:%M:%S))"
            $B run --config $O/$tag.json > $O/$tag.txt
            $B report $O/$tag.h5 --out $O/$tag.md --json $O/$tag.metrics.json > /dev/null
            touch $O/$tag.done
        done
    done
    # llama.cpp on this temperature's prompts (the same for every configuration), right after ours
    if [ "$LLAMA" = 1 ]; then
        for g in $SETS_; do
            [ -f $O/prompts-t$Tm-$g.jsonl ] || continue
            echo "run.sh: llama.cpp t$Tm-$g ($(date +%H:%M:%S))"
            python3 experiments/real-pair/llama_side.py "$BIN" "$TGT_PATH" "$DFT_PATH" "$T" "$Tm" \
                $O/prompts-t$Tm-$g.jsonl $O/llama-t$Tm-$g.jsonl
        done
    fi
done
python3 experiments/real-pair/summary.py $O "$TEMPS" > $O/summary.md
cat $O/summary.md
