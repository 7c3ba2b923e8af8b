"""The studies in experiments/ loaded from their files (scripts with a main, each loaded afresh)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_study(name: str):
    """experiments/<name>.py as a new module."""
    spec = importlib.util.spec_from_file_location(f"study_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
