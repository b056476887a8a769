#!/bin/bash
# The capacity simulator's check against Triton itself, in one device call: `latpred collect serving
# --server triton` (collectors/triton_serving.py) serves MODELS (default resnet101, densenet169,
# roberta-large) at fp16 with tritonserver as PyTriton ships it, under Poisson load at six levels
# of each batching setting's capacity, every request traced by Triton. A setting named -x<k>
# (SETTINGS="mb16-nodelay mb4-nodelay-x2") is served by k model instances; one needs a one-instance
# setting beside it whose max batch is k times its own (the collector says so otherwise).
#
# PyTriton (55 MB as a wheel) and what it needs that the GPU machine lacks travel as one xz tarball of
# the unpacked cp312 wheels, .whl/pytriton_site.tar.xz (39 MB: nvidia-pytriton 0.7.0, tritonclient,
# pyzmq, sh, importlib_metadata, python-rapidjson, geventhttpclient, gevent, greenlet, zope.event,
# zope.interface, brotli; `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux_2_35_x86_64 ...` (tritonclient==2.51.0, the server's release), unzip each into one folder,
# move tritonclient-*.data/purelib/* up into it (that wheel keeps its package there), `tar -cJf`),
# carried with `.whl`. It is unpacked into the interpreter's own site-packages:
# Triton's Python backend stub embeds the interpreter it finds on PATH and reads that one's
# site-packages, not PYTHONPATH. The repository's datasets and bundles must stay behind (git rm
# --cached, .git/info/exclude) for the tarball to fit the 64 MiB a call carries.
# Brings back $OUT/triton_serving.tgz (the serving-triton folder; untar it into datasets/) and
# $OUT/triton_serving.txt; host_before.json and host_after.json in the folder are the host's
# profile probed (without reference forwards) before and after the loads.
#   OUT=<folder> [MODELS=resnet101,densenet169,roberta-large] [SETTINGS="mb16-delay500us mb8-nodelay"] [LIMIT=420] \
#     [LOAD_SECONDS=4] [LEVELS=0.3,0.6,0.7,0.8,0.85,0.9] bash benchmarks/triton_serving.sh
# (not SECONDS: bash's own variable of that name counts the script's seconds from the value given)
# At LIMIT the collector is sent SIGTERM: it writes every load answered in full, names the rest in
# meta.json ("unmeasured") and exits; stopping Triton may take it up to a minute (then SIGKILL), so keep
# LIMIT a minute and a half inside the device call. The host probes need pandera's and pydantic's wheels
# in .whl/ beside the tarball (README, "Collecting on a GPU").
set -u
source benchmarks/device_env.sh
log=$OUT/triton_serving.txt
gpu_machine_header $log
unpack_pytriton $log
ldd "$PYTRITON_SITE/pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub" | grep -i python >> $log
setting_flags=()
for name in ${SETTINGS:-}; do setting_flags+=(--setting "$name"); done
mkdir -p $OUT/root
# the host's profile before and after: the PyTriton path's own time per batch is Python on this host
python3 -m latpred host probe --no-references --note "before the Triton loads" --out $OUT/root/host_before.json >> $log 2>&1
timeout -k 60 ${LIMIT:-420} python3 -m latpred collect serving --server triton --precision fp16 "${setting_flags[@]}" \
  --seconds ${LOAD_SECONDS:-4} --levels "${LEVELS:-}" \
  --models ${MODELS:-resnet101,densenet169,roberta-large} --out $OUT/root >> $log 2>&1 || echo "stopped (exit $?)" >> $log
python3 -m latpred host probe --no-references --note "after the Triton loads" --out $OUT/root/host_after.json >> $log 2>&1
date -u >> $log
tar -C $OUT/root -czf $OUT/triton_serving.tgz . && rm -rf $OUT/root
grep -v -E '^[IW][0-9]{4} ' $log | tail -60
