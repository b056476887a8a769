"""The ``latpred`` command line: a root group whose subcommands load lazily from their package.

Each package owns its commands (``collectors.cli`` measures, later ``training`` trains and
``service`` serves); the root only knows where they live, so ``latpred --help`` and a serve-only
install never import torch.
"""

from __future__ import annotations

import importlib

import click

#: command name -> "module:attribute" of the Click command that implements it.
LAZY_COMMANDS: dict[str, str] = {
    "device": "collectors.cli:device",
    "collect": "collectors.cli:collect",
    "devices": "predictor.cli_predict:devices",
    "predict": "predictor.cli_predict:predict",
    "train": "training.cli:train",
    "validate": "training.cli:validate",
    "serve": "service.cli:serve",
}


class LazyGroup(click.Group):
    """A Click group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise click.ClickException(
                f"'latpred {cmd_name}' needs a part of latpred that is not installed here "
                f"({exc.name or exc}); install the extra it needs: pip install 'latpred[collect]' "
                f"(measuring), 'latpred[train]' (training) or 'latpred[serve]' (serving)"
            ) from None
        return getattr(module, attribute)

    def invoke(self, ctx: click.Context) -> object:
        # Commands import their heavy dependencies (torch, xgboost, mlflow) when they run.
        try:
            return super().invoke(ctx)
        except ImportError as exc:
            raise click.ClickException(
                f"this command needs {exc.name or exc}, which is not installed: install latpred with "
                "the extra for the job: 'latpred[collect]' (measuring), 'latpred[train]' (training), "
                "'latpred[predict]' (predicting) or 'latpred[serve]' (serving)"
            ) from None


@click.group(cls=LazyGroup)
@click.version_option(package_name="latpred")
def main() -> None:
    """latpred: predict how long a neural network takes on a GPU, before running it there."""


if __name__ == "__main__":  # python -m predictor.cli, where latpred is not installed (the GPU machine)
    main()
