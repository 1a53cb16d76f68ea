#!/usr/bin/env bash
# One lent accelerator session in one or two calls on the same warm machine: the benchmarks, the test suite and
# (TABLE2=1, the default) Balle et al.'s Table II MNIST column at the paper's scale
# (experiments/configs/balle_mnist.py:gpu).
#
#   call 1: RECON_JAX_GIT_COMMIT=<commit> bash benchmarks/device_session.sh start OUT
#   call 2 (within the machine's warm period, if call 1 ended before the work): bash benchmarks/device_session.sh finish OUT
#
# start: installs the wheels in .whl/; runs the benchmarks alone on the accelerator (benchmarks/device_check.sh,
# PHASES=bench); with TABLE2=1 launches the Table II run in the background as two processes that share one store
# folder (one trains the model sets ahead, `sets_only`; the other runs the rows and trains the reconstructors; the
# stores' writer lock makes the later one load, never retrain); launches the device check's suite in the
# background too (PHASES=suite); waits until everything launched has ended or START_WAIT seconds after the call
# began, and copies what exists to OUT (a summary of the suite so far if it is still running). finish: waits up
# to FINISH_WAIT seconds after its own start for what is still running, and copies everything to OUT again.
# Background processes start their own session (setsid), so they outlive call 1 on a warm machine. The state
# lives in RJ_STATE (default /tmp/rj_session); the run's folder in /dev/shm when it has room (the stores take
# ~40 GB), else /tmp. Without an accelerator it is a dry run of the same steps (device_check.sh's tiny sizes, Table
# II at the smoke variant unless CONFIG is set; tests/test_device_check.py runs it with TABLE2=0).
#
# Sizes measured on one H100 (results/device/h100): the benchmarks take ~130 s alone; the suite with 14 workers
# reached 96% in 420 s. With TABLE2=0 the suite gets device_check.sh's defaults, 14 workers for 480 s, so that
# call 1 with START_WAIT=570 (and timeout_s 600) ends with the benchmarks done and the suite nearly so, and a
# short call 2 (FINISH_WAIT=90) collects the rest.
set -uo pipefail

mode=${1:?usage: device_session.sh start|finish OUT}
out=${2:?usage: device_session.sh start|finish OUT}
cd "$(dirname "$0")/.."
mkdir -p "$out"
state=${RJ_STATE:-/tmp/rj_session}
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
# Table II at the paper's scale on an accelerator; without one (a dry run) at smoke sizes unless CONFIG says otherwise.
if [ -z "${CONFIG:-}" ] && [ "$("$PYTHON" -c 'import jax; print(jax.default_backend())' 2>/dev/null)" = cpu ]; then
  config=experiments/configs/balle_mnist.py:smoke
else
  config=${CONFIG:-experiments/configs/balle_mnist.py:gpu}
fi

pack() {
  # A suite still running has written no summary of its own yet: summarise its log so far.
  [ -f "$state/suite.rc" ] || "$PYTHON" -m benchmarks._device summary "$state/check" > /dev/null 2>&1
  cp "$state/check/summary.md" "$out/summary.md" 2>/dev/null
  tar czf "$out/check.tgz" -C "$state" check 2>/dev/null
  if [ -f "$state/launched_table2" ]; then
    files=$(cd "$work/run" 2>/dev/null && ls report.md metrics.json config.json rows_partial.json ./*.png 2>/dev/null)
    [ -n "$files" ] && tar czf "$out/balle_gpu.tgz" -C "$work/run" $files
  fi
  tail -c 30000 "$state/run.log" > "$out/run_tail.log" 2>/dev/null
  tail -c 8000 "$state/sets.log" > "$out/sets_tail.log" 2>/dev/null
  tail -c 8000 "$state/suite.log" > "$out/suite_tail.log" 2>/dev/null
  { echo "work root $work"; df -h "$work" | tail -1; nvidia-smi --query-gpu=memory.used,memory.total --format=csv;
    echo "suite rc: $(cat "$state/suite.rc" 2>/dev/null || echo running)";
    if [ -f "$state/launched_table2" ]; then
      echo "run rc: $(cat "$state/run.rc" 2>/dev/null || echo running)";
      echo "sets rc: $(cat "$state/sets.rc" 2>/dev/null || echo running)"; fi;
    cat "$state/check/phases.txt" 2>/dev/null; } > "$out/status.txt" 2>&1
}

running() {  # true while something launched has not written its exit code
  [ ! -f "$state/suite.rc" ] && return 0
  [ -f "$state/launched_table2" ] && [ ! -f "$state/run.rc" ] && return 0
  return 1
}

wait_all() {  # wait_all SECONDS_AFTER_CALL_START
  while running && [ $(( $(date +%s) - call_start )) -lt "$1" ]; do sleep 5; done
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
  # 2. Table II in the background (TABLE2=1). Memory: the sets process and the run preallocate fixed shares; the
  #    suite's workers (3.) allocate on demand from the rest.
  if [ "${TABLE2:-1}" = "1" ]; then
  touch "$state/launched_table2"
  setsid nohup bash -c "XLA_PYTHON_CLIENT_MEM_FRACTION=${SETS_MEM:-0.25} $PYTHON -m experiments.balle_mnist \
    --config=$config --config.sets_only=True --config.store_dir=$work/stores --workdir=$work/sets \
    > $state/sets.log 2>&1; echo \$? > $state/sets.rc" > /dev/null 2>&1 &
  setsid nohup bash -c "XLA_PYTHON_CLIENT_MEM_FRACTION=${RUN_MEM:-0.45} $PYTHON -m experiments.balle_mnist \
    --config=$config --config.store_dir=$work/stores --workdir=$work/run \
    > $state/run.log 2>&1; echo \$? > $state/run.rc" > /dev/null 2>&1 &
  fi
  # 3. The suite meanwhile (mostly compilation on the host's cores), in its own session too: a second call can
  #    wait for it.
  # Beside Table II: 10 workers for 330 s; alone: device_check.sh's defaults (14 workers for 480 s on an
  # accelerator, the dry run's sizes without one), unless set.
  if [ "${TABLE2:-1}" = "1" ]; then workers=${WORKERS:-10}; suite_s=${SUITE_TIMEOUT:-330};
  else workers=${WORKERS:-}; suite_s=${SUITE_TIMEOUT:-}; fi
  setsid nohup bash -c "PHASES=suite WHEELS=none PYTHON=$PYTHON WORKERS=$workers \
    SUITE_TIMEOUT=$suite_s RERUN_TIMEOUT=${RERUN_TIMEOUT:-90} \
    bash benchmarks/device_check.sh $state/check > $state/suite.log 2>&1; echo \$? > $state/suite.rc" \
    > /dev/null 2>&1 &
  wait_all "${START_WAIT:-560}"
  pack
elif [ "$mode" = "finish" ]; then
  wait_all "${FINISH_WAIT:-0}"
  pack
else
  echo "mode must be start or finish, got $mode"; exit 2
fi
cat "$out/status.txt"
grep -E "^BENCH" "$state/check/bench.txt" 2>/dev/null
if [ -f "$state/run.log" ]; then tail -5 "$state/run.log"; fi
exit 0  # what ran is in status.txt and the files; the script itself succeeded
