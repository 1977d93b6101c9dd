#!/bin/bash
# Records the CUDA fixtures (tests/fixtures/h200) and runs profuse's CUDA checks, in one go, on a GPU
# machine lent through the device tool. `device_run.sh verify` runs only the checks (no recording). Run from the repository root with $OUT set; the wheels profuse
# needs beyond that machine's image (msgspec, blake3, duckdb, starlette, uvicorn, isal) in .whl/.
# Everything lands under /tmp/fx and is packed into $OUT/fixtures.tar.gz after each stage, so a stage
# that runs out of time still leaves what came before. The log: $OUT/log.txt.
set -u
export PYTHONUNBUFFERED=1 PROFUSE_CACHE_DIR=/tmp/pcache TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
L=$OUT/log.txt
W=/tmp/fx
mkdir -p "$W"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$L" 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
P="python3 -m profuse"
B=tools/cuda_fixtures/bert_infer.py
T0=$(date +%s)

pack() { tar czf "$OUT/fixtures.tar.gz" -C "$W" . 2>>"$L"; }
stage() {  # stage NAME SECONDS CMD...: the command's output into the log, its status and time after
    local name=$1 lim=$2 s
    shift 2
    s=$(date +%s)
    echo "=== $name (t=$(( s - T0 )) s)" >>"$L"
    timeout "$lim" "$@" >>"$L" 2>&1
    echo "=== $name rc=$? in $(( $(date +%s) - s )) s" >>"$L"
    pack
}

MODE=${1:-record}
stage env 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv;
  python3 -c "import torch, transformers, sys; print(sys.version); print(torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.get_device_name())"'
stage build_ext 120 env PROFUSE_REQUIRE_SCANNER=1 python3 setup.py -q build_ext --inplace
stage scanner 30 python3 -c "from profuse.trace import _native, compiled; print('scanner', _native.available(), 'accel', bool(compiled.accel))"

if [ "$MODE" = record ]; then
# the recorded bundles: 2 warm-up calls (the graph capture, compilation), 3 recorded
stage bert_eager 150 $P run --out $W/bert_eager --warmup 2 --steps 3 -- python3 $B --mode eager
stage bert_graph 150 $P run --out $W/bert_graph --warmup 2 --steps 3 -- python3 $B --mode graph
stage bert_compile 200 $P run --out $W/bert_compile --warmup 2 --steps 3 -- python3 $B --mode compile
stage bert_reduce_overhead 200 $P run --out $W/bert_reduce_overhead --warmup 3 --steps 3 -- python3 $B --mode reduce-overhead --calls 7
stage bert_eager_memory 150 $P run --memory --out $W/bert_eager_memory --warmup 2 --steps 2 -- python3 $B --mode eager --layers 2

# the case study on the GPU: its default (fp32 4,256,2048) and a bf16 LLM-sized row
stage study_rmsnorm 150 bash -c "$P study rmsnorm --device cuda --out $W/rmsnorm_fp32 --format json > $W/rmsnorm_fp32.json"
stage study_rmsnorm_bf16 150 bash -c "$P study rmsnorm --device cuda --shape 8,2048,4096 --dtype bfloat16 --out $W/rmsnorm_bf16 --format json > $W/rmsnorm_bf16.json"
stage peaks 90 $P peaks --device cuda --refresh

# what profuse says of each bundle, and the eager/graph comparison
for b in bert_eager bert_graph bert_compile bert_reduce_overhead bert_eager_memory; do
  stage "report_$b" 60 bash -c "COLUMNS=160 $P report $W/$b --top 12 && $P report $W/$b --format json -o $W/$b.report.json"
done
stage diff_eager_graph 60 bash -c "COLUMNS=160 $P diff $W/bert_eager $W/bert_graph"
# a model run on the CPU of this GPU machine (tests/fixtures/h200/cpu_model_on_gpu_host is its "before")
stage study_llama_cpu 150 bash -c "COLUMNS=160 $P study llama --device cpu --out $W/llama_cpu"
fi

# the capture tests with a GPU present (conftest wants one shared trace: .devshared carries a 2 KB one)
stage pytest_capture 120 env PROFUSE_SHARED=$PWD/.devshared python3 -m pytest -q -p no:cacheprovider -p no:logging \
  tests/test_capture.py tests/test_run_steps.py tests/test_cpu_key_averages.py tests/test_memory_snapshot.py \
  tests/test_capture_privateuse1.py tests/test_study_rmsnorm.py
stage study_llama 150 bash -c "COLUMNS=160 $P study llama --device cuda --out $W/llama"
echo "=== done t=$(( $(date +%s) - T0 )) s" >>"$L"
