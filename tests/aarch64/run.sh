#!/usr/bin/env bash
# specnb's kernel tests on aarch64 (ARM), on an x86-64 Linux machine, under qemu-user emulation:
#   sudo tests/aarch64/run.sh          (root: debootstrap needs it; Debian or Ubuntu host)
# 1. an arm64 Debian bookworm root: debootstrap --foreign (Debian's package), every package of
#    it unpacked on the host (no second stage, no chroot, no binfmt_misc needed: the aarch64
#    programs are started by qemu-aarch64-static with QEMU_LD_PREFIX pointing at the root);
# 2. the aarch64 wheels of specnb's dependencies, installed by the host's pip (--platform);
# 3. specnb's sources, copied (specnb/ with kernels/ as specnb/kernels, as the wheel has them);
# 4. tests/aarch64/test_neon.py in the emulated CPU (QEMU_CPU=max: dotprod and i8mm), then a short
#    decode of the default model (SmolLM2-135M), which must print " Paris.".
# Idempotent: the root and the wheels are reused (delete $SPECNB_AARCH64_DIR to start over).
# SPECNB_NEON_TYPES=Q8_0,Q4_K compares only those tensor types (each takes minutes to compile
# under emulation); SPECNB_AARCH64_DECODE=0 skips the decode.
# Measured running time: docs/aarch64.md.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${SPECNB_AARCH64_DIR:-$HOME/.cache/specnb-aarch64}"
ROOT="$WORK/root"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
HOST_PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$HOST_PY" ] || HOST_PY=python3
export QEMU_CPU="${QEMU_CPU:-max}"
start=$(date +%s)
say() { echo "aarch64: $* ($(( $(date +%s) - start )) s)"; }
mkdir -p "$WORK"

# -- the tools
if ! command -v debootstrap >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap qemu-user-static >/dev/null
fi

# -- the arm64 root
if [ ! -x "$ROOT/usr/bin/python3.11" ]; then
  say "debootstrap arm64 bookworm into $ROOT"
  rm -rf "$ROOT"
  debootstrap --arch=arm64 --foreign --variant=minbase --include=python3 bookworm "$ROOT" "$MIRROR" >"$WORK/debootstrap.log"
  for deb in "$ROOT"/var/cache/apt/archives/*.deb; do
    dpkg-deb --fsys-tarfile "$deb" | tar -xf - -C "$ROOT" --keep-directory-symlink --no-same-owner
  done
fi
ARM_PY=(qemu-aarch64-static "$ROOT/usr/bin/python3.11")
export QEMU_LD_PREFIX="$ROOT"
"${ARM_PY[@]}" -c 'import platform; assert platform.machine() == "aarch64", platform.machine()'

# -- the wheels (the bounds of pyproject.toml; numba-cuda is left out: no GPU here)
WHEELS=("numba==0.68.1" "llvmlite>=0.50,<0.51" "numpy>=2.3" "gguf>=0.19" "tokenizers>=0.23" "jinja2>=3.1.6"
        "pytest>=8" "hypothesis>=6")
want="${WHEELS[*]}"
if [ ! -f "$WORK/site/.specnb-wheels" ] || [ "$(cat "$WORK/site/.specnb-wheels")" != "$want" ]; then
  say "installing the aarch64 wheels"
  rm -rf "$WORK/site"
  "$HOST_PY" -m pip install -q --disable-pip-version-check --target "$WORK/site" --only-binary=:all: --python-version 3.11 \
    --implementation cp --abi cp311 --abi abi3 --abi none --platform manylinux_2_28_aarch64 \
    --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --platform linux_aarch64 "${WHEELS[@]}"
  echo "$want" >"$WORK/site/.specnb-wheels"
fi

# -- specnb's sources and the default model
rm -rf "$WORK/src"
mkdir -p "$WORK/src"
# (-p: the files keep their times, so Numba's cache of what was compiled before still matches)
cp -Rp "$REPO/specnb" "$WORK/src/specnb"
cp -Rp "$REPO/kernels" "$WORK/src/specnb/kernels"
cp "$REPO/tests/aarch64/test_neon.py" "$WORK/src/"
printf '[pytest]\n' >"$WORK/src/pytest.ini"
MODEL="$("$HOST_PY" -m specnb models path smollm2-135m)"
cp -n "$MODEL" "$WORK/" 2>/dev/null || true
MODEL="$WORK/$(basename "$MODEL")"

export PYTHONPATH="$WORK/src:$WORK/site" SPECNB_ARM_LAUNCHER="$(command -v qemu-aarch64-static)"
export HOME="$WORK/home" SPECNB_CACHE_DIR="$WORK/home/specnb-cache" PYTHONDONTWRITEBYTECODE=1
mkdir -p "$HOME"
cd "$WORK/src"            # (not the repository: its specnb/ has no kernels/ inside)
# the level auto picks on the emulated CPU, reached as a real run reaches it (a kernel module
# imported first): the best NEON level the CPU reports; the checks and the decode then run on it
unset SPECNB_SIMD
level="$("${ARM_PY[@]}" -c 'import specnb.kernels.matmul_q8; from specnb.kernels import simd; print(simd.SIMD_LEVEL)')"
case "$level" in
  neon|neon-i8mm) export SPECNB_EXPECT_SIMD="$level" ;;
  *) echo "aarch64: level $level: the emulated CPU ($QEMU_CPU) reports no dotprod" >&2; exit 1 ;;
esac
say "the SIMD level: $SPECNB_EXPECT_SIMD (QEMU_CPU=$QEMU_CPU)"

# -- the kernel tests
"${ARM_PY[@]}" -m pytest -q -p no:cacheprovider test_neon.py
say "kernel tests passed (types: ${SPECNB_NEON_TYPES:-all})"

# -- a short decode of the default model (compiles the whole forward pass: long under emulation;
#    SPECNB_AARCH64_DECODE=0 leaves it out)
if [ "${SPECNB_AARCH64_DECODE:-1}" = 0 ]; then say "all passed (no decode)"; exit 0; fi
out="$("${ARM_PY[@]}" -m specnb generate -m "$MODEL" -p "The capital of France is" -n 8 --temp 0)"
echo "$out"
case "$out" in
  *" Paris."*) say "decode ok" ;;
  *) echo "aarch64: the decode did not print \" Paris.\"" >&2; exit 1 ;;
esac
say "all passed"
