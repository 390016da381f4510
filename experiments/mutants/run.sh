#!/bin/sh
# Mutation testing of the losslessness gate (scripts/mutants.py): random single-token edits of the
# code that decides which tokens are emitted — the tree verifier, block verification, and the loop's
# verify-and-commit step — each built in a private copy and judged by the gate. One command from the
# repository root, resumable (a judged mutant is kept in out/mutants-*/results.jsonl; rm -r to redo),
# ~1 h 50 min of one core on a Zen 1 for the first three campaigns, ~3 h for the second round (campaigns
# can run beside each other, a core each):
#
#   sh experiments/mutants/run.sh
#   N=0 sh experiments/mutants/run.sh     # every mutant, not a sample of each file (~6 h)
#
# The samples are drawn with a fixed seed, so a rerun judges the same mutants. The killers of each
# campaign are the gate cases that run its code: the toy worlds (every rule's exact law) and, for the
# loop, drafters whose rounds take each path (ngram: chains under every scheduler and block
# verification; recycling: deterministic top-k trees; vanilla: trees sampled without replacement;
# dspark-markov: block verification of sampled drafts).
set -e
N=${N:-40}
lim() { [ "$N" = 0 ] || echo "--limit $1"; }
python3 scripts/mutants.py $(lim "$N") --out out/mutants-tree verify/tree.c
python3 scripts/mutants.py $(lim $((N * 5 / 8))) --drafters ngram,toy,dspark-markov --out out/mutants-block verify/block.c
python3 scripts/mutants.py $(lim $((N * 5 / 8))) --drafters ngram,recycling,vanilla --out out/mutants-decode \
  engine/decode.c:284-374
# second round (the chain rules, the sampler and the logits processor under the unit suite that checks
# them against a float64 reference, the drafters' q-consistency, the loop's per-position statistics)
python3 scripts/mutants.py $(lim $((N * 5 / 4))) --drafters ngram,toy,test:test_verify --out out/mutants-verify verify/verify.c
python3 scripts/mutants.py --drafters ngram,test:test_verify,toy --out out/mutants-sampling runtime/sampling.c
python3 scripts/mutants.py $(lim $((N / 2))) --drafters ngram,test:test_verify,toy --out out/mutants-logits verify/logits.c
python3 scripts/mutants.py --drafters medusa,dspark-markov,dspark-rnn --out out/mutants-draftq \
  drafters/registry.c:100-120 drafters/subvocab.c:179-187 drafters/dspark.c:374-378 drafters/dspark.c:424-446
python3 scripts/mutants.py $(lim $((N * 2 / 5))) --drafters test:test_engine --out out/mutants-trace engine/decode.c:383-400
# third round (the tree drafter that draws its children: vanilla's siblings, its tree's assembly and the
# dynamic tree sampled without replacement, judged by the gate's vanilla cases and controls and by
# test_vanilla's tree checks; the rest of the tree verifier)
python3 scripts/mutants.py $(lim "$N") --drafters vanilla,test:test_vanilla --out out/mutants-vtree \
  drafters/vanilla.c:436-522 drafters/vanilla.c:647-745
python3 scripts/mutants.py $(lim $((N * 2))) --out out/mutants-tree verify/tree.c
# the round's budget (how many drafts or nodes each request may ask for, the scheduler's lengths clamped
# to what was drafted) and the emitted tokens' stop rules (end of generation, max_new, the context)
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --drafters ngram,recycling,test:test_engine,vanilla --out out/mutants-round \
  engine/decode.c:49-58 engine/decode.c:243-283
# fourth round (the runtime's side of a tree round: each node's RoPE position and parent slots, the
# attention mask that hides every slot but a node's own and its ancestors', the accepted path's KV rows
# compacted into place), judged first by the gate's tree cases, then by the forward's and the loop's suites
python3 scripts/mutants.py $(lim "$N") --timeout 600 --drafters recycling,vanilla,test:test_forward,test:test_engine \
  --out out/mutants-tattn runtime/forward.c:95-135 runtime/backends/backend_cpu.c:796-806 runtime/backends/backend.c:134-160
# the schedulers' rules the gate's losslessness rests on (Algorithm 1's candidates and early stop,
# async-topk's delayed budget, the threshold rule), judged by the block drafter whose controls run them
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --drafters dspark-markov,ngram,test:test_schedulers --out out/mutants-sched \
  schedulers/greedy.c:25-110 schedulers/async_topk.c:45-66 schedulers/threshold.c:13-22
# fifth round: combine's choice and its union tree (lossless by construction, so the unit suite's checks of
# what it drafts are the killers after the gate), the gate's own p-values, and the request's life before
# the first round (its streams, the prefill token, the prompt rows a drafter observes, the draft pacing)
python3 scripts/mutants.py $(lim $((N * 3 / 2))) --timeout 300 --drafters combine,test:test_engine --out out/mutants-combine \
  drafters/combine.c:122-330
python3 scripts/mutants.py $(lim $((N * 5 / 4))) --drafters test:test_verify,ngram --out out/mutants-stats verify/stats.c
python3 scripts/mutants.py $(lim "$N") --timeout 300 --drafters ngram,vanilla,test:test_engine --out out/mutants-prefill \
  engine/decode.c:9-52 engine/decode.c:68-164
# sixth round: the gate's enumerator itself (the replay that every exact case rests on: path weights,
# branch order, and its refusals of programs it cannot enumerate), and the prompt rows a drafter observes
# at prefill with a prompt long enough to be chunked
python3 scripts/mutants.py $(lim $((N * 9 / 8))) --drafters test:test_verify,toy,ngram --out out/mutants-enum verify/enumerate.c
python3 scripts/mutants.py --drafters test:test_engine,recycling --out out/mutants-observe engine/decode.c:68-92
# the gate's production-round side: the target's reference law, the exact and sampled cases' counting,
# the drafters' q-consistency judges (dspark-markov's and medusa's q-consistency controls need a top-p setting)
python3 scripts/mutants.py $(lim "$N") --timeout 300 --drafters ngram,recycling,vanilla,dspark-markov --out out/mutants-gate \
  engine/gate_round.c:89-150 engine/gate_round.c:349-625
# seventh round: the toy worlds' own enumeration (the law every chain-rule exact case compares), the
# synthetic tree cases and their controls, the toy gate's case judges, and the metrics `report` prints
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --seed 7 --drafters toy,test:test_verify --out out/mutants-lenum \
  verify/lossless.c:162-376
python3 scripts/mutants.py $(lim $((N * 5 / 8))) --seed 7 --drafters toy,test:test_verify --out out/mutants-tenum verify/tree_enum.c
python3 scripts/mutants.py $(lim "$N") --seed 11 --timeout 300 --drafters toy,test:test_verify --out out/mutants-ljudge \
  verify/lossless.c:416-940
python3 scripts/mutants.py --timeout 20 --drafters test:test_trace --out out/mutants-metrics engine/metrics.c
# eighth round: the gate's tuned worlds (rw_tune's threshold and curve, rw_open's world), the CPU backend's
# attention and the forward's body and passes, judged by the suites that compare logits; STS calibration
# and the SPS tables greedy prices with
python3 scripts/mutants.py $(lim $((N * 11 / 8))) --timeout 300 --drafters dspark-markov,vanilla,ngram --out out/mutants-rwopen \
  engine/gate_round.c:156-340
python3 scripts/mutants.py $(lim $((N * 9 / 8))) --seed 3 --timeout 120 --drafters test:test_forward,test:test_reference \
  --out out/mutants-attn runtime/backends/backend_cpu.c:655-990
python3 scripts/mutants.py $(lim "$N") --seed 5 --timeout 120 --drafters test:test_forward,test:test_reference \
  --out out/mutants-fwd runtime/forward.c:159-330
python3 scripts/mutants.py $(lim $((N * 5 / 4))) --seed 9 --timeout 60 --drafters test:test_calib --out out/mutants-calib calib/calib.c
python3 scripts/mutants.py --timeout 60 --drafters test:test_schedulers,ngram --out out/mutants-sps schedulers/sps.c
# ninth round: what the target reads before any token is drafted (the tokenizer: UTF-8, the pre-tokenizers,
# BPE, special tokens, chat prompts; the quantizers and decoders; the CPU kernels of every path this
# machine has) and the serving simulation's accounting, judged by the suites that compare them with
# independent implementations (gguf-py, PyPI regex, the float64 reference) and by serve's identities
python3 scripts/mutants.py $(lim $((N * 15 / 4))) --seed 13 --timeout 60 --drafters test:test_tokenizer --out out/mutants-tok \
  runtime/text/tokenizer.c
K=test:test_kernels,test:test_quant,test:test_reference,test:test_forward
python3 scripts/mutants.py $(lim "$N") --seed 13 --timeout 120 --drafters $K --out out/mutants-quant runtime/formats/quant.c
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --seed 13 --timeout 120 --drafters $K --out out/mutants-kscalar runtime/kernels/kernels_scalar.c
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --seed 13 --timeout 120 --drafters $K --out out/mutants-kcpu runtime/kernels/kernels_cpu.c
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --seed 13 --timeout 120 --drafters $K --out out/mutants-amx runtime/kernels/kernels_amx.c
python3 scripts/mutants.py $(lim $((N * 3 / 4))) --seed 13 --timeout 120 --drafters $K --out out/mutants-simd runtime/kernels/kernels_x86.inc
python3 scripts/mutants.py --timeout 200 --drafters 'test:test_engine@test_serve*' --out out/mutants-serve engine/serve.c
python3 scripts/mutants.py $(lim "$((N * 3))") --seed 13 --timeout 60 --drafters test:test_trace --out out/mutants-trace9 engine/trace.c
# tenth round: what the user hands the workbench (the JSON reader and config getters, prompt files,
# GGUF and safetensors containers, the model and checkpoint loaders) and the rest of the schedulers,
# every mutant of each file, judged by the suites that feed them bad input at each boundary
python3 scripts/mutants.py --seed 17 --timeout 200 --drafters test:test_jcfg,test:test_contract,'test:test_cli@test_strict_configs',test:test_cli \
  --out out/mutants-jcfg runtime/base/jcfg.c
python3 scripts/mutants.py --seed 17 --timeout 120 --drafters test:test_gguf,test:test_forward,test:test_models --out out/mutants-gguf runtime/formats/gguf.c
python3 scripts/mutants.py --seed 17 --timeout 60 --drafters test:test_datasets,'test:test_cli@test_strict_configs' --out out/mutants-datasets datasets/datasets.c
python3 scripts/mutants.py --seed 17 --timeout 120 --drafters test:test_safetensors,test:test_train,test:test_vanilla --out out/mutants-st runtime/formats/safetensors.c
python3 scripts/mutants.py --seed 17 --timeout 120 --drafters test:test_forward,test:test_safetensors,test:test_models --out out/mutants-model runtime/model/model.c
python3 scripts/mutants.py --seed 17 --timeout 120 --drafters test:test_schedulers,dspark-markov,ngram --out out/mutants-sched10 \
  schedulers/hedge.c schedulers/bandit.c schedulers/async_topk.c
python3 scripts/mutants.py --seed 17 --timeout 200 --drafters test:test_training_free,ngram,recycling,suffix --out out/mutants-accstats drafters/accept_stats.c
# eleventh round: the tenth's rest (model.c's HF loader tail, the schedulers, the acceptance statistics, above,
# resumed) judged with by-hand cases (Hedge's laws, UCB1's and Thompson's choices, the counts' whole table), the
# unkilled mutants of the tenth round judged again (--again), and the best-first tree builder shared by the
# learned drafters' tree modes
python3 scripts/mutants.py --seed 17 --limit 30 --timeout 200 --drafters test:test_medusa,test:test_vanilla,medusa --out out/mutants-treebuild drafters/tree_build.c
python3 scripts/mutants.py --timeout 120 --drafters test:test_forward,test:test_safetensors,test:test_models \
  --again out/mutants-model/results.jsonl --out out/mutants-model-again2 runtime/model/model.c
python3 scripts/mutants.py --timeout 120 --drafters test:test_schedulers,dspark-markov,ngram \
  --again out/mutants-sched10/results.jsonl --out out/mutants-sched10-again schedulers/hedge.c schedulers/bandit.c schedulers/async_topk.c
python3 scripts/mutants.py --seed 17 --limit 16 --timeout 200 --drafters test:test_training_free,ngram --out out/mutants-ngram11 drafters/ngram.c
# twelfth round: the training-free drafters' own files (ngram whole, suffix, suffix_tree, recycling), each judged by
# test_training_free and its drafter's gate; the unkilled judged again (--again) against the by-hand cases the
# round added (the confidence cells seen from outside, the best-first and sibling trees, the static template
# whole, the end-of-generation stops)
python3 scripts/mutants.py --seed 17 --timeout 200 --drafters test:test_training_free,ngram --out out/mutants-ngram11 drafters/ngram.c
python3 scripts/mutants.py --timeout 200 --drafters test:test_training_free,ngram --out out/mutants-ngram12b drafters/ngram.c  # all again, the new cases in
python3 scripts/mutants.py --seed 19 --timeout 200 --drafters test:test_training_free,suffix --out out/mutants-suffix12 drafters/suffix.c
python3 scripts/mutants.py --timeout 200 --drafters test:test_training_free,suffix --again out/mutants-suffix12/results.jsonl \
  --out out/mutants-suffix12-again drafters/suffix.c
python3 scripts/mutants.py --seed 19 --timeout 200 --drafters test:test_training_free,recycling --out out/mutants-recycling12 drafters/recycling.c
python3 scripts/mutants.py --timeout 200 --drafters test:test_training_free,recycling --again out/mutants-recycling12/results.jsonl \
  --out out/mutants-recycling12-again drafters/recycling.c
python3 scripts/mutants.py --seed 19 --timeout 40 --drafters test:test_training_free,suffix --out out/mutants-stree12 drafters/suffix_tree.c
# the drafters' contract with their checkpoints, and the rest of the best-first tree builder (the eleventh round's sample resumed)
python3 scripts/mutants.py --seed 19 --timeout 200 --drafters test:test_contract,test:test_medusa --out out/mutants-contract12 drafters/contract.c
python3 scripts/mutants.py --seed 17 --timeout 200 --drafters test:test_medusa,test:test_vanilla,medusa --out out/mutants-treebuild drafters/tree_build.c
# thirteenth round: the learned drafters' own files (Medusa whole; samples of DSpark's serving, MTP / EAGLE-3 and the
# block drafters' model), judged by their suites and a gate; the unkilled judged again (--again) against the round's
# trained-vs-served, tree-path and init cases
python3 scripts/mutants.py --seed 23 --timeout 120 --drafters test:test_medusa,test:test_train,medusa --out out/mutants-medusa13 drafters/medusa.c
python3 scripts/mutants.py --timeout 120 --drafters test:test_medusa,test:test_train --again out/mutants-medusa13/results.jsonl \
  --out out/mutants-medusa13-again drafters/medusa.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_medusa,test:test_train --again out/mutants-medusa13-again/results.jsonl \
  --out out/mutants-medusa13-again2 drafters/medusa.c
python3 scripts/mutants.py --seed 23 --limit 90 --timeout 150 --drafters test:test_train,test:test_medusa,dspark-markov --out out/mutants-dspark13 drafters/dspark.c
python3 scripts/mutants.py --seed 23 --limit 110 --timeout 150 --drafters test:test_mtp,test:test_train,test:test_medusa,mtp --out out/mutants-mtp13 drafters/mtp.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_mtp,test:test_train --again out/mutants-mtp13/results.jsonl \
  --out out/mutants-mtp13-again drafters/mtp.c
python3 scripts/mutants.py --seed 23 --limit 30 --timeout 150 --drafters test:test_train,test:test_medusa,dspark-markov --out out/mutants-block13 drafters/blockdraft.c
# fourteenth round: the draft vocabulary (subvocab.c whole, draft_vocab.c whole) and the registry's shared
# pieces (a sample outside the lines the second round judged), then the unkilled judged again against the
# round's by-hand cases (the resumed subvocab sample ran with them already in the tree)
python3 scripts/mutants.py --seed 29 --limit 126 --timeout 150 --drafters test:test_train,test:test_mtp,test:test_vanilla,test:test_medusa \
  --out out/mutants-subvocab14 drafters/subvocab.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_vanilla,test:test_train --again out/mutants-subvocab14/results.jsonl \
  --out out/mutants-subvocab14-again2 drafters/subvocab.c
python3 scripts/mutants.py --seed 29 --timeout 150 --drafters test:test_train --out out/mutants-dvocab14 drafters/draft_vocab.c
python3 scripts/mutants.py --seed 29 --limit 40 --timeout 200 --drafters test:test_vanilla,test:test_train,test:test_mtp,test:test_medusa,test:test_training_free,test:test_contract,test:test_engine \
  --out out/mutants-registry14 drafters/registry.c:1-99 drafters/registry.c:121-213
python3 scripts/mutants.py --timeout 200 --drafters test:test_contract,test:test_train,test:test_engine,vanilla \
  --again out/mutants-registry14/results.jsonl --out out/mutants-registry14-again drafters/registry.c
# fifteenth round: the distilled LM's model file (whole), the config readers (whole, by the new in-process suite
# test_config), samples of the training loop and the data cache; the unkilled judged again against the round's cases
python3 scripts/mutants.py --seed 31 --timeout 150 --drafters test:test_vanilla,test:test_train,vanilla --out out/mutants-vlm15 drafters/vanilla_lm.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_vanilla,test:test_train,vanilla --again out/mutants-vlm15/results.jsonl \
  --out out/mutants-vlm15-again drafters/vanilla_lm.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_train,test:test_vanilla --again out/mutants-vlm15-again/results.jsonl \
  --out out/mutants-vlm15-again2 drafters/vanilla_lm.c
python3 scripts/mutants.py --timeout 60 --drafters test:test_config --out out/mutants-config15 cli/config.c cli/train_config.c
python3 scripts/mutants.py --timeout 60 --drafters test:test_config --again out/mutants-config15/results.jsonl \
  --out out/mutants-config15-again cli/config.c cli/train_config.c
python3 scripts/mutants.py --seed 31 --limit 100 --timeout 150 --drafters test:test_train,test:test_vanilla,test:test_mtp,test:test_medusa \
  --out out/mutants-train15 engine/train.c
python3 scripts/mutants.py --timeout 150 --drafters test:test_train,test:test_vanilla,test:test_mtp,test:test_medusa \
  --again out/mutants-train15/results.jsonl --out out/mutants-train15-again engine/train.c
# (stopped after 64 of its 100 at the session's time; the rest resume with the same command)
python3 scripts/mutants.py --seed 31 --limit 100 --timeout 150 --drafters test:test_train,test:test_vanilla,test:test_mtp \
  --out out/mutants-traindata15 datasets/traindata.c
mkdir -p out/mutants
for c in tree block decode verify sampling logits draftq trace vtree round tattn sched combine stats prefill enum observe gate lenum tenum ljudge metrics rwopen attn fwd calib sps tok quant kscalar kcpu amx simd serve trace9 jcfg gguf datasets st model sched10 accstats treebuild model-again2 sched10-again ngram11 ngram12b suffix12 suffix12-again recycling12 recycling12-again stree12 contract12 medusa13 medusa13-again medusa13-again2 dspark13 mtp13 mtp13-again block13 subvocab14 subvocab14-again2 dvocab14 registry14 registry14-again vlm15 vlm15-again vlm15-again2 config15 config15-again train15 train15-again traindata15; do cat out/mutants-$c/report.md; done > out/mutants/report.md
echo "experiments/mutants: out/mutants/report.md"
