"""The Flask REST service over ``predictor``: ``service.app.create_app`` builds it, ``service.wsgi:app``
serves it under gunicorn (``service/gunicorn_conf.py``), ``latpred serve`` runs the development
server, and ``service.client`` calls it. No latency logic lives here: handlers call ``predictor``.
"""
