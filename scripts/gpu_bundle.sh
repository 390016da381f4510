#!/bin/bash
# gpu_bundle.sh — pack what scripts/gpu_check.sh needs for a GPU machine that has the CUDA driver
# and cuBLAS but not this project's Debian packages, and takes a limited amount of files per
# transfer (the lent H100 of issue 26: 64 MiB a call).
#
#   make && bash scripts/gpu_bundle.sh DIR [PART_MB]      # default PART_MB 44 (MiB)
#
# DIR/part1: the stripped binaries and the non-glibc shared libraries they load (xz), every prompt set
# of the shared datasets (xz, ~4 MB: Spec-Bench for experiments/quickstart.json, the training mix and
# the held-out sets for scripts/gpu_train.sh), the first PART_MB of the model; DIR/part2..: the rest of
# the model. On the GPU machine, in order, each part's `bash unpack.sh WORK` into the same WORK;
# the last one joins the model and checks its sha256; then
#   source WORK/env.sh && DSB_BUILD=WORK/build bash scripts/gpu_check.sh OUTDIR
# (and DSB_BUILD=WORK/build bash scripts/gpu_train.sh OUTDIR for the training budget)
# (GPU_CHECK_STAGE=ops or int8 after part1 alone: everything that needs no model; DSPARK_MODEL=none
# packs part1 without the model or the prompt sets, one part for such a run).
set -eu
DIR=$1
MB=${2:-44}
BLD=${DSB_BUILD:-build}
M=${DSPARK_MODEL:-$HOME/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf}
DATA=${DSPARK_DATA:-../shared/datasets}
[ -x "$BLD/dspark-bench" ] && [ -x "$BLD/tests/test_cuda" ] || { echo "gpu_bundle: build first (make && make tests)"; exit 1; }
[ "$M" = none ] || [ -f "$M" ] || { echo "gpu_bundle: model $M missing (make model)"; exit 1; }
rm -rf "$DIR" && mkdir -p "$DIR/part1" "$DIR/stage/lib" "$DIR/stage/build/tests"
cp "$BLD/dspark-bench" "$DIR/stage/build/" && cp "$BLD/tests/test_cuda" "$DIR/stage/build/tests/"
strip "$DIR/stage/build/dspark-bench" "$DIR/stage/build/tests/test_cuda"
# the libraries outside glibc and the compiler's runtime (the GPU machine's own are newer)
ldd "$BLD/dspark-bench" "$BLD/tests/test_cuda" | awk '/=>/ {print $3}' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+)\.so|ld-linux' |
  while read -r l; do cp -L "$l" "$DIR/stage/lib/"; done
tar -C "$DIR/stage" -cJf "$DIR/part1/bin.tar.xz" build
tar -C "$DIR/stage" -cJf "$DIR/part1/lib.tar.xz" lib
rm -rf "$DIR/stage"
n=0
if [ "$M" != none ]; then
  tar -C "$DATA" -cJf "$DIR/part1/data.tar.xz" .
  sha256sum "$M" | cut -c1-64 > "$DIR/part1/model.sha256"
  # part1 carries PART_MB of the model beside the rest; each later part up to 60 MiB of it
  head -c "$((MB * 1048576))" "$M" > "$DIR/model.00"
  tail -c +"$((MB * 1048576 + 1))" "$M" | split -b 60m -d --numeric-suffixes=1 - "$DIR/model."
  for p in "$DIR"/model.[0-9]*; do
    n=$((n + 1)); mkdir -p "$DIR/part$n"; mv "$p" "$DIR/part$n/"
  done
fi
echo "$n" > "$DIR/part1/model.nparts"
cat > "$DIR/unpack.sh" <<'EOS'
#!/bin/bash
# unpack.sh WORK — from each part's folder, in order: binaries and libraries, model parts; the last
# part joins the model and checks it; WORK/env.sh sets the paths gpu_check.sh needs
set -eu
P=$(cd "$(dirname "$0")" && pwd); W=$1; mkdir -p "$W"
for t in lib bin; do [ -f "$P/$t.tar.xz" ] && tar -C "$W" -xJf "$P/$t.tar.xz"; done
[ -f "$P/data.tar.xz" ] && mkdir -p "$W/data" && tar -C "$W/data" -xJf "$P/data.tar.xz"
for f in "$P"/model.*; do [ -f "$f" ] && cp "$f" "$W/"; done
CUB=$(ls /usr/local/cuda*/lib64/libcublas.so.1[0-9]* /usr/lib/x86_64-linux-gnu/libcublas.so.1[0-9]* \
      /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcublas.so.1[0-9]* 2>/dev/null | head -1)
M=$W/SmolLM2-135M-Instruct.Q4_1.gguf
{ echo "export LD_LIBRARY_PATH=$W/lib:$(dirname "${CUB:-/usr/local/cuda/lib64/x}"):\${LD_LIBRARY_PATH:-}"
  echo "export DSPARK_DATA=$W/data DSPARK_MODEL=$M"; } > "$W/env.sh"
n=$(cat "$W/model.nparts"); have=$(ls "$W"/model.[0-9]* 2>/dev/null | wc -l)
if [ "$n" -eq 0 ]; then
  echo "unpack: no model in this bundle (GPU_CHECK_STAGE=ops or int8)"
elif [ "$have" -eq "$n" ]; then
  cat "$W"/model.[0-9]* > "$M" && echo "$(cat "$W/model.sha256")  $M" | sha256sum -c && rm "$W"/model.[0-9]*
else
  echo "unpack: $have of $n model parts here"
fi
EOS
for d in "$DIR"/part*; do cp "$DIR/unpack.sh" "$d/"; done
rm "$DIR/unpack.sh"
du -sh "$DIR"/part*
