# dspark-bench — one binary, one static library of its modules, CMocka test binaries.
#
#   make            build build/dspark-bench (installs missing Debian packages first)
#   make model      fetch the embedded default target into ~/.cache/dspark-bench (sha256-checked);
#                   MODEL=qwen2.5-coder-1.5b / qwen2.5-coder-0.5b the real pair (scripts/fetch_model.py)
#   make run        the main job on the embedded default
#   make test       every test suite (SAN=1: AddressSanitizer + UBSan build in build-san/)
#   make bench      bench-target on the embedded default, JSON into bench/
#   make lossless   the losslessness gate (report in build/gate/)
#   make faults     fault injection: full disk, unwritable output, concurrent runs, SIGKILL mid-write
#   make fuzz       libFuzzer targets for every parser of user input (clang), FUZZ_SECONDS=600 each

.DEFAULT_GOAL := all
# Builds use every core unless -j is given on the command line (which wins): a serial build was half
# of CI's `make test` stage and a third of its SAN stage on a two-core Zen 1 (210 s and 363 s of 2,863).
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
SAN ?= 0
CC ?= gcc
BUILD := build
OPT := -O2
ifeq ($(SAN),1)
  BUILD := build-san
  OPT := -O1 -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow
endif

# Package flags are resolved once, after scripts/deps.sh made sure the packages are there.
-include $(BUILD)/config.mk
$(BUILD)/config.mk: scripts/deps.sh
	@./scripts/deps.sh
	@mkdir -p $(BUILD)
	@echo "PKG_CFLAGS := $$(pkg-config --cflags openblas hdf5 libcjson)" > $@
	@echo "PKG_LIBS := $$(pkg-config --libs openblas hdf5 libcjson) -lhdf5_hl" >> $@
	@echo "CMOCKA_LIBS := $$(pkg-config --libs cmocka)" >> $@

# One build runs on every x86-64 machine: the baseline is x86-64-v2 (SSE4.2), and the SIMD kernel
# paths are compiled for their own ISA below and chosen at run time from cpuid (runtime/base/cpu_features.c).
CFLAGS := -std=c11 -D_GNU_SOURCE -g $(OPT) -march=x86-64-v2 -mtune=generic -fopenmp -ffp-contract=off \
          -Wall -Wextra -Wno-missing-field-initializers -MMD -MP $(PKG_CFLAGS)
LDFLAGS := $(OPT) -fopenmp
LDLIBS := $(PKG_LIBS) -lm

# CUDA: runtime/backends/backend_cuda.c and its kernels are built when nvcc is found (CUDA=0 skips them, and
# the sanitizer build does: ASan's shadow memory and the CUDA driver's mappings do not mix). The
# CUDA runtime is linked statically and cuBLAS opened at run time, so the binary runs on machines
# with neither a GPU nor the CUDA libraries; only `--backend cuda` needs them.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# a toolkit laid out as NVIDIA ships it: nvcc, the static runtime and cuBLAS's header
CUDA_FOUND := $(and $(NVCC),$(wildcard $(CUDA_HOME)/lib64/libcudart_static.a),$(wildcard $(CUDA_HOME)/include/cublas_v2.h))
ifeq ($(SAN),1)
  CUDA ?= 0
else
  CUDA ?= $(if $(CUDA_FOUND),1,0)
endif
CUDA_OBJ :=
ifeq ($(CUDA),1)
  CFLAGS += -DDS_CUDA -I$(CUDA_HOME)/include
  LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
  CUDA_OBJ := $(BUILD)/runtime/kernels/kernels_cuda.o $(BUILD)/runtime/kernels/kernels_cuda_i8.o
endif
# Ampere and Hopper machine code, and PTX for anything newer
NVCCFLAGS := -O2 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
# objects are rebuilt when CUDA is switched on or off
CUDA_FLAG := $(BUILD)/cuda-flag
$(shell mkdir -p $(BUILD); [ "$$(cat $(CUDA_FLAG) 2>/dev/null)" = "$(CUDA)" ] || echo $(CUDA) > $(CUDA_FLAG))

LIB_SRC := $(wildcard runtime/*.c runtime/base/*.c runtime/formats/*.c runtime/model/*.c runtime/text/*.c runtime/backends/*.c runtime/train/*.c runtime/kernels/*.c verify/*.c drafters/*.c schedulers/*.c calib/*.c datasets/*.c engine/*.c)
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BIN := $(BUILD)/dspark-bench

.PHONY: all deps model run test tests bench fuzz faults lossless clean
all: $(BIN)

deps: $(BUILD)/config.mk

$(BUILD)/%.o: %.c $(BUILD)/config.mk $(CUDA_FLAG) $(wildcard runtime/train/*.inc runtime/kernels/*.inc drafters/*.inc)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/runtime/kernels/%.o: runtime/kernels/%.cu runtime/kernels/kernels_cuda.h runtime/kernels/kernels_cuda_launch.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

ISA_AVX2 := -mavx2 -mfma -mf16c
ISA_AVX512 := $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512vnni
$(BUILD)/runtime/kernels/kernels_avx2.o: CFLAGS += $(ISA_AVX2)
$(BUILD)/runtime/kernels/kernels_avx512.o: CFLAGS += $(ISA_AVX512)
$(BUILD)/runtime/kernels/kernels_amx.o: CFLAGS += $(ISA_AVX512) -mamx-tile -mamx-int8
$(BUILD)/runtime/kernels/kernels_avx2.o $(BUILD)/runtime/kernels/kernels_avx512.o $(BUILD)/runtime/kernels/kernels_amx.o: runtime/kernels/kernels_x86.inc

$(BUILD)/libdspark.a: $(LIB_OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(BUILD)/libdspark.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libdspark.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libdspark.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdspark.a $(LDLIBS) $(CMOCKA_LIBS)

# the config readers live with the command line (cli/); their suite links them beside the library
CONFIG_OBJ := $(BUILD)/cli/config.o $(BUILD)/cli/train_config.o
$(BUILD)/tests/test_config: tests/test_config.c $(wildcard tests/*.h) $(BUILD)/libdspark.a $(CONFIG_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CONFIG_OBJ) $(BUILD)/libdspark.a $(LDLIBS) $(CMOCKA_LIBS)

# MODEL=NAME: smollm2-135m (the default), qwen2.5-coder-1.5b, qwen2.5-coder-0.5b (~1.1 GB / 0.5 GB, resumable)
MODEL ?= smollm2-135m
model:
	@python3 scripts/fetch_model.py $(MODEL)

# The greedy scheduler prices verification with this machine's SPS(B) table: measured once (~10 s)
run: $(BIN) model
	@mkdir -p $(BUILD)/quickstart
	@[ -f $(BUILD)/quickstart/sps.json ] || { echo "make run: measuring this machine's SPS(B) table (bench-target)"; \
	  $(BIN) bench-target --max-B 16 --reps 3 --decode-tokens 32 --out $(BUILD)/quickstart/sps.json > $(BUILD)/quickstart/sps.txt; }
	$(BIN) run --config experiments/quickstart.json
	$(BIN) report build/quickstart/run.h5 --out build/quickstart/report.md
	@sed -n '5,/^Outputs/p' build/quickstart/report.md

tests: $(TESTS) $(BIN)

# Each suite runs from the repo root; the real-model suites find the model in the cache. The suites
# run one a core and one thread each (tests/run_suites.sh; OMP_NUM_THREADS=1 sets the CPU backend's
# default), slowest first so the lanes end together: two-thread suites side by side thrash at their
# barriers, and the gate's suite alone beside the rest left a lane idle (under ASan on a two-core Zen 1,
# ~14 min a lane). Each suite's output is held until it ends.
TEST_SLOWEST := $(addprefix $(BUILD)/tests/,test_verify test_engine test_cli test_reference)
TEST_ORDER := $(TEST_SLOWEST) $(filter-out $(TEST_SLOWEST),$(TESTS))
TEST_LANES ?= $(shell nproc 2>/dev/null || echo 1)
test: tests model
	@env DSPARK_BIN=$(abspath $(BIN)) ASAN_OPTIONS=detect_leaks=1 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 \
	  OPENBLAS_NUM_THREADS=1 bash tests/run_suites.sh $(TEST_LANES) $(TEST_ORDER) && echo "ALL TESTS PASSED" || \
	  { echo "TESTS FAILED"; exit 1; }

bench: $(BIN) model
	@mkdir -p bench
	$(BIN) bench-target --out bench/bench-target.json

# The losslessness gate: toy worlds, the production round on a tiny target and on SmolLM2 on both
# matmul contracts (int8, the default, and fp32 --exact) (so it needs the model); exits non-zero if a
# lossless case is rejected or a control is not flagged. Its cases are single-threaded, so the two
# halves of --both-contracts run at once (one a core); build/gate/lossless.md holds both tables.
lossless: $(BIN) model
	@mkdir -p $(BUILD)/gate
	@rm -f $(BUILD)/gate/lossless.md $(BUILD)/gate/lossless-*.md
	@$(BIN) lossless --part 1/2 --out $(BUILD)/gate/lossless-1.h5 > $(BUILD)/gate/lossless-1.md & p1=$$!; \
	  $(BIN) lossless --part 2/2 --out $(BUILD)/gate/lossless-2.h5 > $(BUILD)/gate/lossless-2.md; r2=$$?; \
	  wait $$p1; r1=$$?; \
	  cat $(BUILD)/gate/lossless-1.md $(BUILD)/gate/lossless-2.md > $(BUILD)/gate/lossless.md; \
	  echo "part 1/2 (toy worlds, int8): $$(tail -1 $(BUILD)/gate/lossless-1.md)"; \
	  echo "part 2/2 (fp32): $$(tail -1 $(BUILD)/gate/lossless-2.md)"; \
	  test $$r1 -eq 0 -a $$r2 -eq 0

# Fault injection on the real binary: every case ends with the complete old or new result.
faults: $(BIN) model
	bash tests/fault/faults.sh $(BIN)

# libFuzzer targets for every parser of user input, each run FUZZ_SECONDS under ASan + UBSan:
# gguf (reader, decoders, tokenizer), model (loading, packing, a forward), config (run/train/drafter/scheduler JSON), dataset (loaders),
# safetensors (+ HF config.json), trace (the reader behind `report`), drafter (every drafter's settings
# against a tiny target, and two short decodes with what opens). Needs clang and libomp-14-dev.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= gguf model config dataset safetensors trace drafter
FUZZ_BUILD := build-fuzz
# fuzz_trace's memory grows ~180 KB per input across mutated HDF5 files (not reproduced by looping
# HDF5 calls on one input; an open lead): it runs in fork mode, a child restarted after an OOM
FUZZ_FLAGS_trace := -fork=1 -ignore_ooms=1
# fuzz_model's seeds are whole tiny models (the K-quant ones ~100-330 KB)
FUZZ_FLAGS_model := -max_len=400000
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -march=x86-64-v2 -fopenmp -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined $(PKG_CFLAGS)
FUZZ_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o) $(FUZZ_BUILD)/cli/config.o $(FUZZ_BUILD)/cli/train_config.o \
            $(FUZZ_BUILD)/cli/cmd_report.o $(FUZZ_BUILD)/cli/report_sweep.o $(FUZZ_BUILD)/cli/report_curve.o \
            $(FUZZ_BUILD)/cli/plot.o $(FUZZ_BUILD)/cli/args.o
.SECONDARY: $(FUZZ_OBJ)
$(FUZZ_BUILD)/runtime/kernels/kernels_avx2.o: FUZZ_CFLAGS += $(ISA_AVX2)
$(FUZZ_BUILD)/runtime/kernels/kernels_avx512.o: FUZZ_CFLAGS += $(ISA_AVX512)
$(FUZZ_BUILD)/runtime/kernels/kernels_amx.o: FUZZ_CFLAGS += $(ISA_AVX512) -mamx-tile -mamx-int8
$(FUZZ_BUILD)/%.o: %.c $(BUILD)/config.mk
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -o $@ $(PKG_LIBS) -lm
fuzz: $(BIN) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
	@mkdir -p $(FUZZ_BUILD)/seeds/gguf $(FUZZ_BUILD)/seeds/trace
	python3 tests/fuzz/make_seeds.py $(FUZZ_BUILD)/seeds/gguf
	python3 tests/fuzz/make_seeds_inputs.py $(FUZZ_BUILD)/seeds
	@mkdir -p $(FUZZ_BUILD)/seeds/model
	FUZZ_MODEL_SEEDS=$(FUZZ_BUILD)/seeds/model $(FUZZ_BUILD)/fuzz_model
	@mkdir -p $(FUZZ_BUILD)/seeds/drafter
	FUZZ_DRAFTER_SEEDS=$(FUZZ_BUILD)/seeds/drafter $(FUZZ_BUILD)/fuzz_drafter
	FUZZ_TRACE_SEEDS=$(FUZZ_BUILD)/seeds/trace $(FUZZ_BUILD)/fuzz_trace
	@# a trace to start from: the quick gate's (at 200 draws its controls lack power and it says so; the file is written anyway)
	@test -f $(FUZZ_BUILD)/seeds/trace/gate.h5 || $(BIN) lossless --quick --no-real --draws 200 \
	  --out $(FUZZ_BUILD)/seeds/trace/gate.h5 > /dev/null 2>&1 || test -f $(FUZZ_BUILD)/seeds/trace/gate.h5
	@# the fuzzer's own exit status decides (a pipeline's is its last command's)
	@for t in $(FUZZ_TARGETS); do mkdir -p $(FUZZ_BUILD)/corpus/$$t; echo "== fuzz_$$t ($(FUZZ_SECONDS) s)"; \
	  flags=""; [ $$t = trace ] && flags="$(FUZZ_FLAGS_trace)"; [ $$t = model ] && flags="$(FUZZ_FLAGS_model)"; \
	  (ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -rss_limit_mb=2048 -print_final_stats=1 $$flags $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/seeds/$$t; echo "fuzz exit $$?") \
	    2>&1 | grep -v '^warning: ' | tee $(FUZZ_BUILD)/fuzz_$$t.log | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|fuzz exit"; \
	  grep -q '^fuzz exit 0$$' $(FUZZ_BUILD)/fuzz_$$t.log || exit 1; done

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
