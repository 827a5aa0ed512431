#!/usr/bin/env bash
# One multi-GPU machine's session for docs/benchmarks.md: nccl-tests built against torch's
# NCCL, the run-time health checks (benchmarks/check_new_on_gpu.py), all_reduce and the
# other collectives beside nccl-tests (three runs each), validate's wall time.
#
#   benchmarks/multi_gpu_session.sh NCCL_TESTS_SRC OUT [GPUS]
#
# Needs: /opt/torch/.venv (torch with NCCL), /usr/local/cuda, the controller's wheels under
# .whl/ (see ../docs/benchmarks.md), run as root from the repository root.
set -uo pipefail
src=$1 out=$2 gpus=${3:-4}
py=/opt/torch/.venv/bin/python
mkdir -p "$out"
"$py" -m pip install -q --no-index --no-deps --target /tmp/deps .whl/*.whl >"$out/pip.log" 2>&1
export PATH=/tmp/deps/bin:$PATH PYTHONPATH=$PWD:/tmp/deps NCCL_NVLS_ENABLE=0
date -u +%FT%TZ >"$out/date.txt"
nvidia-smi -L >"$out/gpus.txt" 2>&1; nvidia-smi topo -m >>"$out/gpus.txt" 2>&1
nccl=$("$py" -c 'import nvidia.nccl, os; print(os.path.dirname(list(nvidia.nccl.__path__)[0]) + "/nccl")')
ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"
t0=$(date +%s)
make -C "$src/src" -j 16 NCCL_HOME="$nccl" CUDA_HOME=/usr/local/cuda >"$out/build.log" 2>&1
echo "nccl-tests built in $(( $(date +%s) - t0 )) s (exit $?)" >>"$out/build.log"
bin=$src/build
step() { echo "== $1 $(date -u +%T)"; }
step check; timeout 120 "$py" benchmarks/check_new_on_gpu.py --gpus "$gpus" --driver 580.159.04 \
  --out "$out/check" >"$out/check.log" 2>&1; echo "exit $?" >>"$out/check.log"
step all_reduce; timeout 190 "$py" benchmarks/validate_vs_nccl_tests.py --nccl-tests "$bin/all_reduce_perf" \
  --sizes 1M:4G --repeat 3 --skip-forced-network --nccl-tests-cycles 9 --wall-runs 3 \
  --out "$out/all_reduce" >"$out/all_reduce.log" 2>&1; echo "exit $?" >>"$out/all_reduce.log"
for c in all_gather reduce_scatter alltoall; do
  step "$c"; timeout 70 "$py" benchmarks/validate_vs_nccl_tests.py --collective "$c" \
    --nccl-tests "$bin/${c}_perf" --sizes 1M:1G --repeat 3 --skip-forced-network \
    --nccl-tests-cycles 5 --out "$out/$c" >"$out/$c.log" 2>&1; echo "exit $?" >>"$out/$c.log"
done
step done
