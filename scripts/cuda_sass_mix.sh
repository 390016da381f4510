#!/bin/bash
# cuda_sass_mix.sh — what a CUDA kernel's hot loop executes, read from its machine code (SASS) on a
# machine without a GPU (issue 26): GPU time is scarce, so a kernel's instruction mix, registers and
# spills are checked here before a device run times it.
#
#   bash scripts/cuda_sass_mix.sh [REGEX] [ARCH]     # default: k_matvec_blk sm_90 (H100/H200)
#   SASS_SRC=/tmp/try.cu bash scripts/cuda_sass_mix.sh k_try   # a scratch kernel instead
#
# 1. compiles runtime/kernels/kernels_cuda.cu to a cubin for ARCH with the Makefile's -O2 (ptxas -v
#    gives each kernel's registers, stack and spills);
# 2. for every kernel whose mangled name matches REGEX: its main loop (the backward branch whose body
#    holds the most instructions and a global load: with nested loops, the outer one), the opcodes in
#    it counted by class.
# Reading it: in a GEMV every weight meets each token of the tile in one FFMA, so "instructions per
# FFMA" is the issue cost of one weight for one token; an SM issues 4 x 32 lane-instructions a clock,
# which caps a GEMV at (SMs x clock x 128 / that cost) weights a second (BENCHMARKS.md, issue 26).
# Needs nvcc; cuobjdump and nvdisasm are taken from PATH or the CUDA toolkit, else fetched once from
# PyPI (nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm, ~5.5 MB) into ~/.cache/dspark-bench/cuda-tools.
set -euo pipefail
RE=${1:-k_matvec_blk}
ARCH=${2:-sm_90}
OUT=${SASS_OUT:-build/sass}
SRC=${SASS_SRC:-runtime/kernels/kernels_cuda.cu}
TOOLS=${CUDA_TOOLS_DIR:-$HOME/.cache/dspark-bench/cuda-tools}
VER=13.5.37
die() { echo "cuda_sass_mix.sh: $*" >&2; exit 1; }
[ -f "$SRC" ] || die "$SRC not found (run it from the repository root, or set SASS_SRC to a .cu file)"
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -n "$NVCC" ] || die "nvcc not found (the CUDA toolkit is needed to compile the kernels)"
case $ARCH in sm_[0-9]*) ;; *) die "ARCH '$ARCH' is not of the form sm_NN (sm_90: H100/H200, sm_80: A100)" ;; esac

CUOBJDUMP=$(command -v cuobjdump || true)
[ -z "$CUOBJDUMP" ] && [ -x "$(dirname "$NVCC")/cuobjdump" ] && CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
if [ -z "$CUOBJDUMP" ]; then
    CUOBJDUMP=$TOOLS/nvidia/cu13/bin/cuobjdump
    if [ ! -x "$CUOBJDUMP" ] || [ ! -x "$TOOLS/nvidia/cu13/bin/nvdisasm" ]; then
        echo "cuda_sass_mix.sh: fetching cuobjdump and nvdisasm $VER from PyPI into $TOOLS"
        mkdir -p "$TOOLS/whl"
        python3 -m pip download --no-deps -q -d "$TOOLS/whl" "nvidia-cuda-cuobjdump==$VER" "nvidia-cuda-nvdisasm==$VER" ||
            die "could not fetch nvidia-cuda-cuobjdump/nvdisasm $VER from PyPI (put cuobjdump on PATH instead)"
        for w in "$TOOLS"/whl/nvidia_cuda_cuobjdump-$VER-*.whl "$TOOLS"/whl/nvidia_cuda_nvdisasm-$VER-*.whl; do
            [ -f "$w" ] || die "the wheel for $VER is missing from $TOOLS/whl"
            python3 -m zipfile -e "$w" "$TOOLS" || die "could not unpack $w"
        done
        chmod +x "$TOOLS"/nvidia/cu13/bin/* || die "no binaries in the wheels' nvidia/cu13/bin"
    fi
fi

mkdir -p "$OUT"
CUBIN=$OUT/kernels_$ARCH.cubin
"$NVCC" -O2 -std=c++17 -arch="$ARCH" -cubin -Xptxas -v -Iruntime/kernels -o "$CUBIN" "$SRC" > "$OUT/ptxas_$ARCH.txt" 2>&1 ||
    { cat "$OUT/ptxas_$ARCH.txt" >&2; die "nvcc could not compile $SRC for $ARCH"; }
"$CUOBJDUMP" -sass "$CUBIN" > "$OUT/kernels_$ARCH.sass" || die "cuobjdump could not read $CUBIN"

# ptxas -v: "Compiling entry function 'NAME'", then its stack/spill line and "Used N registers"
awk -v re="$RE" '
    /Compiling entry function/ { fn = $0; sub(/^[^\047]*\047/, "", fn); sub(/\047.*/, "", fn); next }
    fn ~ re && /bytes stack frame/ { s = $0; sub(/^[ \t]+/, "", s); frame[fn] = s }
    fn ~ re && /Used [0-9]+ registers/ { n = $0; sub(/.*Used /, "", n); sub(/ registers.*/, "", n); regs[fn] = n }
    END { for (f in regs) printf "%s: %s registers, %s\n", f, regs[f], frame[f] }
' "$OUT/ptxas_$ARCH.txt" | sort > "$OUT/regs.txt"

# SASS: per function, instructions as (address, opcode, branch target); the main loop's opcode classes
awk -v re="$RE" '
    function hex(s,   i, v) { v = 0; s = tolower(s); sub(/^0x/, "", s); for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
    function flush(   i, j, best, bi, n, lo, hi, has, op, cnt, keys, k, total) {
        if (fn == "" || fn !~ re || ni == 0) return
        best = -1
        for (i = 0; i < ni; i++) {
            if (tgt[i] < 0 || tgt[i] >= addr[i]) continue
            n = 0; has = 0
            for (j = 0; j < ni; j++) if (addr[j] >= tgt[i] && addr[j] <= addr[i]) { n++; if (opc[j] ~ /^LDG/) has = 1 }
            if (has && n > best) { best = n; bi = i }
        }
        printf "%s\n", fn
        if (best < 0) { print "    no loop with a global load"; return }
        lo = tgt[bi]; hi = addr[bi]; delete cnt; total = 0
        for (j = 0; j < ni; j++) if (addr[j] >= lo && addr[j] <= hi) {
            op = opc[j]
            if (op ~ /^(LDG|STG|LDS|STS|LDC)/) { split(op, p, "."); k = p[1]; for (i = 2; i in p; i++) if (p[i] ~ /^(128|64|U8|S8|U16|S16)$/) k = k "." p[i] }
            else { split(op, p, "."); k = p[1] }
            cnt[k]++; total++
        }
        printf "    main loop 0x%04x-0x%04x: %d instructions:", lo, hi, total
        n = 0; for (k in cnt) keys[n++] = k
        for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (cnt[keys[j]] > cnt[keys[i]]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
        for (i = 0; i < n; i++) printf " %s %d%s", keys[i], cnt[keys[i]], i + 1 < n ? "," : "\n"
        if (cnt["FFMA"] > 0) printf "    %.2f instructions per FFMA\n", total / cnt["FFMA"]
    }
    /Function : / { flush(); fn = $NF; ni = 0; next }
    /^[ \t]+\/\*[0-9a-f]+\*\/[ \t]/ {
        line = $0; sub(/;.*/, "", line); sub(/[ \t]+$/, "", line); n = split(line, f, /[ \t]+/)
        a = f[2]; gsub(/[^0-9a-f]/, "", a); a = hex(a); k = 3
        if (f[k] ~ /^@/) k++
        addr[ni] = a; opc[ni] = f[k]; tgt[ni] = -1
        if (f[k] ~ /^BRA/ && f[n] ~ /^0x[0-9a-f]+$/) tgt[ni] = hex(f[n])
        ni++
    }
    END { flush() }
' "$OUT/kernels_$ARCH.sass" > "$OUT/loops.txt"
[ -s "$OUT/loops.txt" ] || die "no kernel matches '$RE' in $CUBIN"

echo "# $SRC on $ARCH ($("$NVCC" --version | grep -o 'release [0-9.]*')), kernels matching '$RE'"
echo "## registers (ptxas -v)"
cat "$OUT/regs.txt"
echo "## main loop per kernel (SASS: $OUT/kernels_$ARCH.sass)"
cat "$OUT/loops.txt"
