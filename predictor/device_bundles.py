"""Which bundle predicts which device: its own, or the transfer bundle from its datasheet.

A device measured with a dataset of its own and trained alone (the H200) has a bundle folder named
by its id, and so does a CPU (which only its own bundle predicts). Every other catalog GPU is
predicted by the transfer bundle (``bundles/transfer``,
training/transfer.py): one kernel model across the measured GPUs that reads a device's specs,
with composition fitted per measured device (the H200's partitions, whose runs it was fitted on:
'measured') or across them (every device never measured: 'transferred'). The CLI and the service
both ask this module, so a device is served the same way by either.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle, BundleError, bundle_dirs
from predictor.devices import DEVICES, DeviceSpec, resolve_device
from predictor.predict import Predictor

#: the transfer bundle's folder name (not a device id: ids are lowercase slugs of GPU names)
TRANSFER_BUNDLE = "transfer"


def is_transfer(key: str) -> bool:
    """Whether a bundle folder's name is the transfer bundle's."""
    return key == TRANSFER_BUNDLE


def bundle_folder(device_id: str, root: Path = DEFAULT_BUNDLE_DIR) -> Path:
    """The folder whose bundle predicts ``device_id``: its own where it has one, else the transfer
    bundle's (never a CPU's: the transfer model knows GPUs); a BundleError naming both where
    neither is there."""
    own = Path(root) / device_id
    if (own / "metadata.json").is_file():
        return own
    if device_id in DEVICES and DEVICES[device_id].kind == "cpu":
        raise BundleError(f"no model bundle predicts {device_id}, a CPU: {own} is not there (run 'latpred train "
                          f"--dataset datasets/{device_id}')")
    transfer = Path(root) / TRANSFER_BUNDLE
    if (transfer / "metadata.json").is_file():
        return transfer
    raise BundleError(f"no model bundle predicts {device_id}: neither {own} nor the transfer bundle {transfer} "
                      "is there (run 'latpred train' or 'latpred transfer')")


def verification_device(key: str, bundle: Bundle | None = None) -> DeviceSpec | None:
    """The device a bundle folder is verified on: the one it is named after, or for the transfer
    bundle the first device it has runs of (a measured partition; any catalog device without a
    bundle if it names none). None where the folder names no known device."""
    if not is_transfer(key):
        return DEVICES.get(key)
    measured = list((bundle.transfer or {}).get("devices", {})) if bundle is not None else []
    for device_id in measured:
        if device_id in DEVICES:
            return DEVICES[device_id]
    return next(iter(DEVICES.values()), None)


def expand_transfer(predictors: Mapping[str, Predictor], own: Collection[str] = ()) -> dict[str, Predictor]:
    """Predictors by device id: each one-device bundle's for its device, and over the transfer
    bundle (keyed ``TRANSFER_BUNDLE`` in ``predictors``) one for every other catalog GPU, all
    sharing that one loaded bundle (its trees compiled once). A device in ``own`` (it has a bundle
    folder of its own, which may have failed to load) is never handed to the transfer bundle: its
    folder serves it or nothing does, and the failure is said where it happened. The own bundles
    come first, in catalog order."""
    # in catalog order (the H200 first): what a service names first is its first GPU's bundle, not
    # whichever folder sorts first
    order = {device_id: i for i, device_id in enumerate(DEVICES)}
    out = {key: p for key, p in sorted(predictors.items(), key=lambda item: order.get(item[0], len(order)))
           if not is_transfer(key)}
    transfer = predictors.get(TRANSFER_BUNDLE)
    if transfer is not None:
        for device_id, spec in DEVICES.items():
            if device_id not in out and device_id not in own and spec.kind == "gpu":
                same = transfer.device.device_id == device_id
                out[device_id] = transfer if same else Predictor(transfer.bundle, spec)
    return out


def load_predictor(device: str, root: Path = DEFAULT_BUNDLE_DIR, bundle: Path | None = None) -> Predictor:
    """The predictor for ``device`` (an id or part of a name): from ``bundle`` if given, else from
    the folder ``bundle_folder`` picks under ``root``."""
    spec = resolve_device(device)
    return Predictor(Bundle.load(bundle or bundle_folder(spec.device_id, root)), spec)


def load_all(root: Path = DEFAULT_BUNDLE_DIR) -> dict[str, Predictor]:
    """A predictor for every device some bundle under ``root`` predicts (each bundle loaded once):
    what hardware selection chooses among on the command line."""
    loaded: dict[str, Predictor] = {}
    for key, folder in bundle_dirs(Path(root)).items():
        bundle = Bundle.load(folder)
        spec = verification_device(key, bundle)
        if spec is not None:
            loaded[key] = Predictor(bundle, spec)
    return expand_transfer(loaded, own=[k for k in loaded if not is_transfer(k)])
