# Sourced by the scripts run on the GPU machine (the device tool's): puts latpred's checkout on
# PYTHONPATH, with the wheels of what that machine lacks (pydantic, pandera and theirs, fetched
# into .whl/ beforehand, README: "Collecting on a GPU") installed beside it when they are there.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
