#!/bin/bash
# Device pages (issue 25) on the GPU machine: builds the Python package (full kernel set, sm_90a),
# runs pytest on $TESTS (default: the serving core's and the engine's GPU and CPU tests and
# tests/python/test_gpu.py), bench/serving_device_pages.py, and compute-sanitizer memcheck of the
# device-pages GPU test. Leaves summary.txt, pytest.log, device_pages.jsonl, memcheck.log, build.log
# under $OUT. Usage (repo root, on the device): TESTS=tests/python bash bench/ab/device_pages.sh
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/summary.txt
python3 -m pip install --no-build-isolation --no-deps -q . -C cmake.define.TREEATTN_CUDA_ARCHS=90a \
  -C build-dir=/tmp/pyb > $OUT/build.log 2>&1
echo "build rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt
cd /tmp && python3 -c 'import treeattn; print("cuda", treeattn.built_with_cuda)' | tee -a $OUT/summary.txt; cd - > /dev/null
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider ${TESTS:-tests/python/test_serving_gpu.py tests/python/test_serving.py tests/python/test_engine_gpu.py tests/python/test_gpu.py} > $OUT/pytest.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/pytest.log)" | tee -a $OUT/summary.txt
timeout 90 python3 bench/serving_device_pages.py > $OUT/device_pages.jsonl 2>$OUT/device_pages.err
echo "bench rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt
cat $OUT/device_pages.jsonl | tee -a $OUT/summary.txt
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_serving_gpu.py -k "device_pages and dtype0" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? at $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(tail -1 $OUT/memcheck.log)" | tee -a $OUT/summary.txt
