"""Where calibrated machine models are kept, and reading a runtime's back (the group service's numa and machine trees).

A calibration (:mod:`multihop.bench.groups.calibrate`, ``multihop groups calibrate``) stores a runtime's model
per machine, where it outlives the runtime (``multihop down`` removes the runtime's directory):
``<model dir>/<host>/<runtime name>/groups-model.toml`` (:func:`stored_path`), the model directory being
``$MULTIHOP_MODEL_DIR``, else ``$XDG_DATA_HOME/multihop/models``, else ``~/.local/share/multihop/models``
(:func:`model_dir`). :func:`stored_model` reads it back when a runtime of that name runs again.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import multihop as mh
from multihop.groups.model import MachineModel, load_model
from multihop.paths import check_name

__all__ = ["MODEL_DIR_ENV", "PATH_STORED_NAME", "STORED_NAME", "kept_path", "model_dir", "stored_model", "stored_path"]

STORED_NAME = "groups-model.toml"
"""The file name of a runtime's stored calibration (in its directory under :func:`model_dir`)."""

MODEL_DIR_ENV = "MULTIHOP_MODEL_DIR"
"""The environment variable that names the directory of stored models (tests set it)."""

PATH_STORED_NAME = "groups-path-model.toml"
"""The file name of a runtime's group-path calibration (``multihop groups calibrate --group-path``), beside its model."""


def model_dir() -> Path:
    """Where this machine's calibrated models are kept: ``$MULTIHOP_MODEL_DIR``, else
    ``$XDG_DATA_HOME/multihop/models``, else ``~/.local/share/multihop/models`` (not created here)."""
    override = os.environ.get(MODEL_DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and ignored
        return Path(xdg) / "multihop" / "models"
    return Path.home() / ".local" / "share" / "multihop" / "models"


def stored_path(name: str, file: str = STORED_NAME) -> Path:
    """The kept model ``file`` of the runtime named ``name`` on this host (see :func:`model_dir`).

    Raises:
        ValueError: ``name`` is not a valid runtime name.
    """
    return model_dir() / _host() / check_name(name) / file


def _host() -> str:
    """This machine's name as a path component (a home directory may be shared between machines)."""
    host = socket.gethostname().replace("/", "_") or "localhost"
    return "_" + host if host.startswith(".") else host


def stored_model(rt: mh.Runtime, file: str = STORED_NAME) -> MachineModel | None:
    """The calibration kept for ``rt`` (:func:`stored_path`; else one left in ``rt``'s directory, where
    calibrations went before), or None if it has none that covers the runtime's cores."""
    for path in (stored_path(rt.name, file), rt.dir / file):
        if path.is_file():
            model = load_model(path)
            if set(rt.cores) <= set(model.cores):  # else a calibration of another runtime of that name
                return model
    return None


def kept_path(name: str, file: str) -> Path:
    """:func:`stored_path` with its directories made (mode 0700)."""
    path = stored_path(name, file)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
