#!/usr/bin/env bash
# One prepared accelerator check: the test suite and the benchmarks on whatever accelerator JAX finds, with a
# summary and the BENCH lines written to OUTDIR. Meant for one call of a lent GPU/TPU machine (at most ~9 min):
#
#   RECON_JAX_GIT_COMMIT=<commit> bash benchmarks/device_check.sh OUTDIR
#
# 1. Installs the wheels in .whl/ (if any) into a private folder: the packages the device image lacks (dm-haiku,
#    ml_collections, dp_accounting, dm-pix, TFDS, ...; see README "GPU and TPU" for the download command), with
#    --no-deps so the image's jax, flax and numpy stay as they are.
# 2. device.json: accelerator, driver, jax and package versions, commit, date.
# 3. The suite (pytest -v, xdist), its log in pytest.log; the summary counts what ran even if the time limit
#    cut it off, and names every failure.
# 4. The benchmarks at accelerator sizes, each BENCH line beside its baseline measured in the same process,
#    into bench.txt.
# 5. summary.md from all of the above (python -m benchmarks._device summary OUTDIR).
#
# Without an accelerator (jax's default backend is the CPU) it is a dry run of the same steps at tiny sizes: a
# few test files and one benchmark, in well under a minute (CI runs it: tests/test_device_check.py).
#
# Knobs (environment): WHEELS (folder of wheels to install; default .whl, "none" for none), PYTHON (default: .venv/bin/python if present, else python3), WORKERS (pytest workers),
# SUITE_TIMEOUT and BENCH_TIMEOUT (seconds), PHASES (comma list of suite,bench; default both),
# PYTEST_TARGETS (what the suite runs; default: tests recon_jax, or the dry run's files).
set -uo pipefail

out=${1:?usage: bash benchmarks/device_check.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
phases=${PHASES:-suite,bench}
[ -f "$out/phases.txt" ] || : > "$out/phases.txt"  # appended to: a bench-only call and a suite-only call add up
t0=$(date +%s)
mark() { echo "$1 $(( $(date +%s) - t0 ))" >> "$out/phases.txt"; }

wheels=${WHEELS:-.whl}
if compgen -G "$wheels/*.whl" > /dev/null; then
  site=${TMPDIR:-/tmp}/recon_jax_site
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl > "$out/install.log" 2>&1 || { echo "wheel install failed (see install.log)"; exit 1; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Several pytest workers share one accelerator: none may take most of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
mark install

"$PYTHON" -m benchmarks._device info "$out" || { echo "could not describe the device"; exit 1; }
backend=$("$PYTHON" -c "import jax; print(jax.default_backend())")
mark info
echo "backend: $backend"

if [ "$backend" = "cpu" ]; then  # dry run: the same steps at tiny sizes
  workers=${WORKERS:-0}  # in-process: no worker start-up for a handful of tests
  suite_timeout=${SUITE_TIMEOUT:-120}
  bench_timeout=${BENCH_TIMEOUT:-120}
  targets=${PYTEST_TARGETS:-tests/data/test_folder_errors.py}
  bench_cmds=("benchmarks.run reconn -- --rows 64 --features 32 --hidden 16 --epochs 1 --batch 16")
else
  workers=${WORKERS:-14}  # an H100 machine's 16 cores: 14 workers reached 96% of the suite in 420 s
  suite_timeout=${SUITE_TIMEOUT:-480}
  bench_timeout=${BENCH_TIMEOUT:-220}
  targets=${PYTEST_TARGETS:-tests recon_jax}
  bench_cmds=(
    "benchmarks.run shadow -- --targets 32768 --rounds 2 --configs 2x1 --chunk-sweep 1024,4096,16384"
    "benchmarks.run dp_shadow --no-peak -- --ghost-models 4096 --vmap-models 64 --minibatch-models 2048 --chunk 1024 --repeats 2"
    "benchmarks.run reconn --no-peak -- --rows 16384 --epochs 2 --stream-rows 0"
  )
fi

if [[ ",$phases," == *",suite,"* ]]; then
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=15 "$suite_timeout" "$PYTHON" -m pytest -v -rfE --tb=line \
    -p no:cacheprovider -n "$workers" --dist loadfile $targets > "$out/pytest.log" 2>&1
  echo "pytest exit $?" >> "$out/pytest.log"
  mark suite
  # The failures' tracebacks: xdist prints them only when the whole run ends, and a run cut off by its time limit
  # never does; rerun the failed tests alone (one process, short tracebacks) for at most RERUN_TIMEOUT seconds.
  grep -oE "(FAILED|ERROR) [^ ]+::[^ ]+" "$out/pytest.log" | awk '{print $2}' | sort -u > "$out/failed_ids.txt"
  if [ -s "$out/failed_ids.txt" ]; then
    # shellcheck disable=SC2046
    timeout --signal=TERM --kill-after=10 "${RERUN_TIMEOUT:-90}" "$PYTHON" -m pytest -p no:cacheprovider -p no:xdist \
      -q -rfE --tb=short $(cat "$out/failed_ids.txt") > "$out/failures.log" 2>&1
    mark rerun_failures
  fi
fi

if [[ ",$phases," == *",bench,"* ]]; then
  : > "$out/bench.txt"
  deadline=$(( $(date +%s) + bench_timeout ))
  for cmd in "${bench_cmds[@]}"; do
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 5 ]; then echo "skipped (time limit): $cmd" >> "$out/bench.txt"; continue; fi
    echo "\$ python -m $cmd" >> "$out/bench.txt"
    # shellcheck disable=SC2086
    timeout --signal=TERM --kill-after=10 "$left" "$PYTHON" -m $cmd >> "$out/bench.txt" 2>&1
    echo "exit $?" >> "$out/bench.txt"
  done
  mark bench
fi

"$PYTHON" -m benchmarks._device summary "$out" > /dev/null
echo "summary: $out/summary.md"
grep -E "^BENCH" "$out/bench.txt" 2>/dev/null || true
sed -n '/^## Test suite/,/^## Benchmarks/p' "$out/summary.md" | head -40
