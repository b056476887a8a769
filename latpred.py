"""The ``latpred`` command line: one root, above every package, that assembles their click groups.

Each package exposes its commands as one click group, ``commands`` in its ``cli`` module
(``predictor.cli``, ``collectors.cli``, ``training.cli``, ``service.cli``); no package knows the
others' commands, and predictor, at the bottom, knows none above it. The root knows only which
package serves which command, and imports a package's ``cli`` module when one of its commands
runs: the GPU machine has no xgboost, mlflow or flask, the service install no torch, and
``latpred --help`` needs none of them.

Installed, it is the ``latpred`` script; from a checkout where latpred is not installed (the GPU
machine), ``PYTHONPATH=$PWD python -m latpred ...``.
"""

from __future__ import annotations

import importlib
import sys

import click

#: command -> (the package whose ``cli.commands`` group holds it, the one line ``latpred --help``
#: shows for it: the first line of the command's docstring, which a test keeps them equal to).
COMMANDS: dict[str, tuple[str, str]] = {
    "capacity": ("predictor", "Plan GPUs and Triton dynamic batching for PATH to serve --qps within --slo-p99-ms."),
    "check": ("training", "Score latpred's predictions of whole-model runs measured on your machine (a device "
                          "folder that 'latpred collect models' wrote), through every importer."),
    "collect": ("collectors", "Measure operators and whole models into a dataset."),
    "device": ("collectors", "Fingerprint the GPU (or, without one, the CPU) that a sweep would measure."),
    "devices": ("predictor", "List the devices latpred knows, whether measured, and which bundle predicts each."),
    "host": ("collectors", "Probe this host's per-call costs: the host profile eager predictions are made for."),
    "predict": ("predictor", "Predict the latency of each PATH (an .onnx or .json graph, or a zoo name)."),
    "select": ("predictor", "Rank the devices for PATH (zoo name, ONNX or JSON graph) by cost per million "
                            "inferences."),
    "serving-path": ("training", "Fit a server's own time per batch (its serving path) from Triton loads measured "
                                 "on one host."),
    "serve": ("service", "Serve the REST API with Flask's development server (docs at /docs, spec at "
                         "/openapi.json)."),
    "train": ("training", "Fit per-layer models (XGBoost and LightGBM), learn composition, export, track."),
    "transfer": ("training", "Fit the transfer model across the measured GPUs, score it leave-one-device-out, "
                             "export it."),
    "validate": ("training", "Predict the measured zoo leave-one-model-out, beside the roofline and FLOPs "
                             "baselines; or, with --suite, score the zoo or a NAS suite through every importer."),
}


def package_commands(package: str, cmd_name: str) -> click.Group:
    """The click group of ``package``, imported now (to run ``cmd_name``); a missing dependency
    is a clear error naming the extra to install."""
    try:
        module = importlib.import_module(f"{package}.cli")
    except ImportError as exc:
        raise click.ClickException(
            f"'latpred {cmd_name}' needs a part of latpred that is not installed here "
            f"({exc.name or exc}); install the extra it needs: pip install 'latpred[collect]' "
            f"(measuring), 'latpred[train]' (training) or 'latpred[serve]' (serving)"
        ) from None
    return module.commands


class Root(click.Group):
    """The root group: lists the commands from ``COMMANDS`` and loads one's package when it runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return package_commands(COMMANDS[cmd_name][0], cmd_name).get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # From the table, not the commands: listing them must not import their packages.
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in sorted(COMMANDS.items())])

    def invoke(self, ctx: click.Context) -> object:
        # Commands import their heavy dependencies (torch, xgboost, mlflow, flask) when they run.
        try:
            return super().invoke(ctx)
        except ValueError as exc:  # a user's device catalog refused as predictor.devices loads it
            catalog = sys.modules.get("predictor.device_catalog")
            if catalog is None or not isinstance(exc, catalog.CatalogError):
                raise
            raise click.ClickException(f"{exc}\n(the catalog laid over the shipped one is "
                                       "$LATPRED_DEVICE_CATALOG: fix it, or unset it)") from None
        except ImportError as exc:
            raise click.ClickException(
                f"this command needs {exc.name or exc}, which is not installed: install latpred with "
                "the extra for the job: 'latpred[collect]' (measuring), 'latpred[train]' (training), "
                "'latpred[predict]' (predicting) or 'latpred[serve]' (serving)"
            ) from None


@click.group(cls=Root)
@click.version_option(package_name="latpred")
def main() -> None:
    """latpred: predict how long a neural network takes on a GPU, before running it there."""


if __name__ == "__main__":  # python -m latpred, where latpred is not installed (the GPU machine)
    main()
