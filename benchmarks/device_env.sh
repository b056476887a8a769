# Sourced by the scripts run on the GPU machine (the device tool's): puts latpred's checkout on
# PYTHONPATH, with the wheels of what that machine lacks (pydantic, pandera and theirs, fetched
# into .whl/ beforehand, README: "Collecting on a GPU") installed beside it when they are there.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# gpu_machine_header FILE: which machine and GPU a device script ran on (its boot id tells leases apart)
gpu_machine_header() {
  { echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo;
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv; } > "$1"
}
# unpack_pytriton LOG: PyTriton and what it needs (.whl/pytriton_site.tar.xz, carried) into the interpreter's
# own site-packages, PYTRITON_SITE: Triton's Python backend stub reads that one's, not PYTHONPATH.
# Where it cannot, says so in LOG and exits 3.
unpack_pytriton() {
  PYTRITON_SITE=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  tar -xJf .whl/pytriton_site.tar.xz -C "$PYTRITON_SITE" \
    || { echo "could not unpack PyTriton into $PYTRITON_SITE" >> "$1"; exit 3; }
}
