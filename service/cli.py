"""``latpred serve``: the development server (use gunicorn in production, see gunicorn_conf.py)."""

from __future__ import annotations

import click


@click.group()
def commands() -> None:
    """The service's commands, which the ``latpred`` root assembles."""


@commands.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="port to listen on")
@click.option("--debug", is_flag=True, help="Flask's debug mode (reloader and debugger; never expose it)")
def serve(host: str, port: int, debug: bool) -> None:
    """Serve the REST API with Flask's development server (docs at /docs, spec at /openapi.json).

    Settings come from the environment: LATPRED_BUNDLES, LATPRED_DATA_DIR (default
    ~/.local/share/latpred), LATPRED_GRAPH_STORE, LATPRED_HOST_STORE, LATPRED_API_KEY (writes want it;
    with none, LATPRED_OPEN_WRITES=1 lets anyone write), LATPRED_GRAPH_STORE_MAX_BYTES,
    LATPRED_GRAPH_MAX_BYTES, LATPRED_MAX_BODY_BYTES, LATPRED_MAX_NODES, LATPRED_MAX_RESULTS,
    LATPRED_MAX_WORK (a prediction request's estimated work, nodes x variants). For production:
    gunicorn -c service/gunicorn_conf.py service.wsgi:app
    """
    from service.app import create_app

    try:
        app = create_app()
    except ValueError as exc:  # a bad LATPRED_* setting
        raise click.ClickException(str(exc)) from None
    app.run(host=host, port=port, debug=debug, threaded=True, use_reloader=debug)
