#!/bin/sh
# build_llamacpp.sh — the peer every side-by-side comparison uses: llama.cpp's CPU tools, built from
# the llama.cpp vendored in the PyPI sdist of llama-cpp-python 0.3.36 (llama.cpp 0c1e570), outside
# the repository (nothing of it is ever committed). Resumable: a downloaded, checked sdist and a
# configured build are reused.
#
#   scripts/build_llamacpp.sh [TARGET ...]     default targets: llama-bench llama-quantize llama-lookup
#
# LLAMACPP_DIR (default ~/.cache/dspark-bench/llamacpp) is where it lives; LLAMACPP_CMAKE adds cmake
# flags; on a CPU whose AMX llama.cpp would use but the guest traps, pass the compiler flags through the
# environment instead (cmake reads them at configure time; a delete of build/ makes it configure again):
# CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="$CFLAGS" scripts/build_llamacpp.sh
# (LLAMACPP_CMAKE is split at spaces, so a quoted flag list cannot go through it). LLAMACPP_BUILD
# (default build) names the build folder, so builds for other instruction sets live side by side: the
# AVX2-only peer (the instruction set of a Zen 3, on any x86 machine):
#   LLAMACPP_BUILD=build-avx2 LLAMACPP_CMAKE=-DGGML_NATIVE=OFF scripts/build_llamacpp.sh llama-bench
# (ggml without GGML_NATIVE enables AVX, AVX2, FMA, F16C and BMI2 and leaves AVX-512 and AMX off).
# 4-10 minutes on two cores.
# Prints the folder of the binaries on its last line.
set -eu
V=0.3.36
SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DIR=${LLAMACPP_DIR:-$HOME/.cache/dspark-bench/llamacpp}
TARGETS=${*:-llama-bench llama-quantize llama-lookup}
TGZ=$DIR/llama_cpp_python-$V.tar.gz
SRC=$DIR/llama_cpp_python-$V/vendor/llama.cpp
B=$DIR/${LLAMACPP_BUILD:-build}
mkdir -p "$DIR"
if [ ! -f "$TGZ" ]; then
    echo "build_llamacpp: downloading the llama-cpp-python $V sdist from PyPI" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$V" -d "$DIR" >&2 ||
        { echo "build_llamacpp: pip download of llama-cpp-python==$V failed" >&2; exit 1; }
fi
echo "$SHA  $TGZ" | sha256sum -c --quiet - || { echo "build_llamacpp: $TGZ: sha256 mismatch (delete it to download again)" >&2; exit 1; }
[ -f "$SRC/CMakeLists.txt" ] || tar -xzf "$TGZ" -C "$DIR"
[ -f "$SRC/CMakeLists.txt" ] || { echo "build_llamacpp: $SRC: no CMakeLists.txt after unpacking" >&2; exit 1; }
# shellcheck disable=SC2086 # LLAMACPP_CMAKE is a list of flags
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF ${LLAMACPP_CMAKE:-} > "$B.cmake.log" 2>&1 ||
    { echo "build_llamacpp: cmake failed, see $B.cmake.log" >&2; exit 1; }
for t in $TARGETS; do
    echo "build_llamacpp: building $t ($(date +%H:%M:%S))" >&2
    cmake --build "$B" -j "$(nproc)" --target "$t" > "$B-$t.log" 2>&1 ||
        { echo "build_llamacpp: building $t failed, see $B-$t.log" >&2; exit 1; }
done
echo "$B/bin"
