#!/usr/bin/env bash
# One lent accelerator session in two calls on the same warm machine: the test suite, the benchmarks, and
# Balle et al.'s Table II MNIST column at the paper's scale (experiments/configs/balle_mnist.py:gpu).
#
#   call 1: RECON_JAX_GIT_COMMIT=<commit> bash benchmarks/device_session.sh start OUT
#   call 2 (within the machine's warm period): bash benchmarks/device_session.sh finish OUT
#
# start: installs the wheels in .whl/; runs the benchmarks alone on the accelerator (benchmarks/device_check.sh,
# PHASES=bench); launches the Table II run in the background as two processes that share one store folder (one
# trains the model sets ahead, `sets_only`; the other runs the rows and trains the reconstructors; the stores'
# writer lock makes the later one load, never retrain); runs the device check's suite meanwhile (PHASES=suite);
# waits for the run until START_WAIT seconds after the call began, and copies what exists to OUT. finish: waits
# up to FINISH_WAIT seconds after its own start for the run, and copies everything to OUT again.
# Background processes start their own session (setsid), so they outlive call 1 on a warm machine. The state
# lives in /tmp/rj_session; the run's folder in /dev/shm when it has room (the stores take ~40 GB), else /tmp.
set -uo pipefail

mode=${1:?usage: device_session.sh start|finish OUT}
out=${2:?usage: device_session.sh start|finish OUT}
cd "$(dirname "$0")/.."
mkdir -p "$out"
state=/tmp/rj_session
mkdir -p "$state"
call_start=$(date +%s)
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
site=/tmp/recon_jax_site
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"

if [ -f "$state/workroot" ]; then
  work=$(cat "$state/workroot")
else
  shm_free=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
  if [ -n "$shm_free" ] && [ "$shm_free" -ge 45 ]; then work=/dev/shm/rj_work; else work=/tmp/rj_work; fi
  echo "$work" > "$state/workroot"
fi
mkdir -p "$work"
config=${CONFIG:-experiments/configs/balle_mnist.py:gpu}

pack() {
  cp "$state/check/summary.md" "$out/summary.md" 2>/dev/null
  tar czf "$out/check.tgz" -C "$state" check 2>/dev/null
  files=$(cd "$work/run" 2>/dev/null && ls report.md metrics.json config.json rows_partial.json ./*.png 2>/dev/null)
  [ -n "$files" ] && tar czf "$out/balle_gpu.tgz" -C "$work/run" $files
  tail -c 30000 "$state/run.log" > "$out/run_tail.log" 2>/dev/null
  tail -c 8000 "$state/sets.log" > "$out/sets_tail.log" 2>/dev/null
  { echo "work root $work"; df -h "$work" | tail -1; nvidia-smi --query-gpu=memory.used,memory.total --format=csv;
    echo "run rc: $(cat "$state/run.rc" 2>/dev/null || echo running)";
    echo "sets rc: $(cat "$state/sets.rc" 2>/dev/null || echo running)";
    cat "$state/check/phases.txt" 2>/dev/null; } > "$out/status.txt" 2>&1
}

wait_run() {  # wait_run SECONDS_AFTER_CALL_START
  while [ ! -f "$state/run.rc" ] && [ $(( $(date +%s) - call_start )) -lt "$1" ]; do sleep 5; done
}

if [ "$mode" = "start" ]; then
  wheels=${WHEELS:-.whl}
  if compgen -G "$wheels/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$wheels"/*.whl > "$state/install.log" 2>&1 || { echo "wheel install failed"; tail "$state/install.log"; exit 1; }
  fi
  # 1. The benchmarks first, alone on the accelerator (their figures are throughputs: nothing else may run).
  if [ "${BENCH:-1}" = "1" ]; then
    PHASES=bench WHEELS=none PYTHON=$PYTHON BENCH_TIMEOUT=${BENCH_TIMEOUT:-170} \
      bash benchmarks/device_check.sh "$state/check"
  fi
  # 2. Table II in the background. Memory: the sets process and the run preallocate fixed shares; the suite's
  #    workers (3.) allocate on demand from the rest.
  setsid nohup bash -c "XLA_PYTHON_CLIENT_MEM_FRACTION=${SETS_MEM:-0.25} $PYTHON -m experiments.balle_mnist \
    --config=$config --config.sets_only=True --config.store_dir=$work/stores --workdir=$work/sets \
    > $state/sets.log 2>&1; echo \$? > $state/sets.rc" > /dev/null 2>&1 &
  setsid nohup bash -c "XLA_PYTHON_CLIENT_MEM_FRACTION=${RUN_MEM:-0.45} $PYTHON -m experiments.balle_mnist \
    --config=$config --config.store_dir=$work/stores --workdir=$work/run \
    > $state/run.log 2>&1; echo \$? > $state/run.rc" > /dev/null 2>&1 &
  # 3. The suite meanwhile (mostly compilation on the host's cores).
  PHASES=suite WHEELS=none PYTHON=$PYTHON WORKERS=${WORKERS:-10} SUITE_TIMEOUT=${SUITE_TIMEOUT:-330} \
    bash benchmarks/device_check.sh "$state/check"
  wait_run "${START_WAIT:-560}"
  pack
elif [ "$mode" = "finish" ]; then
  wait_run "${FINISH_WAIT:-0}"
  pack
else
  echo "mode must be start or finish, got $mode"; exit 2
fi
cat "$out/status.txt"
grep -E "^BENCH" "$state/check/bench.txt" 2>/dev/null
tail -5 "$state/run.log" 2>/dev/null
