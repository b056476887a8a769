"""The WSGI entry point: ``gunicorn -c service/gunicorn_conf.py service.wsgi:app``.

The booster thread caps are set before predictor (and so xgboost or lightgbm) can load, for WSGI
servers that do not read ``service/gunicorn_conf.py``; each worker serves one request per thread
and a booster that spawns a thread per core under it would only contend.
"""

from __future__ import annotations

import logging
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from service.app import create_app  # noqa: E402
from service.gc_policy import collect_between_requests  # noqa: E402

if not logging.getLogger().handlers:  # gunicorn configures its own loggers, not the root one
    logging.basicConfig(level=os.environ.get("LATPRED_LOG_LEVEL", "INFO"),
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
app = create_app()
collect_between_requests(app)
