"""The one error that bad input raises: `SpecError` names the key and the value.

Every layer may raise it (the scenario reader, trace files, the fit's data,
output paths); the CLI turns it into one line and exit status 2. Imports
nothing from the project, so any module may import it.
"""
from __future__ import annotations


class SpecError(ValueError):
    """Bad scenario input: names the key and the offending value in one line."""

    def __init__(self, key: str, value: object, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key} = {show(value)}: {reason}")


def show(value: object) -> str:
    """A value as an error message prints it: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
