#!/bin/bash
# gpu_bundle.sh — pack what scripts/gpu_check.sh needs for a GPU machine that has the CUDA driver
# and cuBLAS but not this project's Debian packages, and takes a limited amount of files per
# transfer (the lent H100 of issue 26: 64 MiB a call).
#
#   make && bash scripts/gpu_bundle.sh DIR [PART_MB]      # default PART_MB 47 (MiB)
#
# DIR/part1: the stripped binaries and the non-glibc shared libraries they load (xz), the Spec-Bench
# prompts of experiments/quickstart.json, the first PART_MB of the model; DIR/part2..: the rest of
# the model. On the GPU machine, in order, each part's `bash unpack.sh WORK` into the same WORK;
# the last one joins the model and checks its sha256; then
#   source WORK/env.sh && DSB_BUILD=WORK/build bash scripts/gpu_check.sh OUTDIR
# (GPU_CHECK_STAGE=ops after part1 alone: everything that needs no model).
set -eu
DIR=$1
MB=${2:-47}
BLD=${DSB_BUILD:-build}
M=${DSPARK_MODEL:-$HOME/.cache/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf}
DATA=${DSPARK_DATA:-../shared/datasets}
[ -x "$BLD/dspark-bench" ] && [ -x "$BLD/tests/test_cuda" ] || { echo "gpu_bundle: build first (make && make tests)"; exit 1; }
[ -f "$M" ] || { echo "gpu_bundle: model $M missing (make model)"; exit 1; }
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
mkdir -p "$DIR/part1/data/specbench" && cp "$DATA/specbench/question.jsonl" "$DIR/part1/data/specbench/"
sha256sum "$M" | cut -c1-64 > "$DIR/part1/model.sha256"
split -b "${MB}m" -d "$M" "$DIR/model."
n=0
for p in "$DIR"/model.[0-9]*; do
  n=$((n + 1)); mkdir -p "$DIR/part$n"; mv "$p" "$DIR/part$n/"
done
echo "$n" > "$DIR/part1/model.nparts"
cat > "$DIR/unpack.sh" <<'EOS'
#!/bin/bash
# unpack.sh WORK — from each part's folder, in order: binaries and libraries, model parts; the last
# part joins the model and checks it; WORK/env.sh sets the paths gpu_check.sh needs
set -eu
P=$(cd "$(dirname "$0")" && pwd); W=$1; mkdir -p "$W"
for t in lib bin; do [ -f "$P/$t.tar.xz" ] && tar -C "$W" -xJf "$P/$t.tar.xz"; done
[ -d "$P/data" ] && cp -r "$P/data" "$W/"
for f in "$P"/model.*; do [ -f "$f" ] && cp "$f" "$W/"; done
CUB=$(ls /usr/local/cuda*/lib64/libcublas.so.1[0-9]* /usr/lib/x86_64-linux-gnu/libcublas.so.1[0-9]* \
      /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcublas.so.1[0-9]* 2>/dev/null | head -1)
M=$W/SmolLM2-135M-Instruct.Q4_1.gguf
{ echo "export LD_LIBRARY_PATH=$W/lib:$(dirname "${CUB:-/usr/local/cuda/lib64/x}"):\${LD_LIBRARY_PATH:-}"
  echo "export DSPARK_DATA=$W/data DSPARK_MODEL=$M"; } > "$W/env.sh"
n=$(cat "$W/model.nparts"); have=$(ls "$W"/model.[0-9]* | wc -l)
if [ "$have" -eq "$n" ]; then
  cat "$W"/model.[0-9]* > "$M" && echo "$(cat "$W/model.sha256")  $M" | sha256sum -c && rm "$W"/model.[0-9]*
else
  echo "unpack: $have of $n model parts here"
fi
EOS
for d in "$DIR"/part*; do cp "$DIR/unpack.sh" "$d/"; done
rm "$DIR/unpack.sh"
du -sh "$DIR"/part*
