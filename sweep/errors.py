"""The one error that bad input raises: `SpecError` names the key and the value.

Every layer may raise it (the scenario reader, trace files, the fit's data,
output paths); the CLI turns it into one line and exit status 2. Imports
nothing from the project, so any module may import it.
"""
from __future__ import annotations

import difflib


class SpecError(ValueError):
    """Bad scenario input: names the key and the offending value in one line."""

    def __init__(self, key: str, value: object, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key} = {show(value)}: {reason}")


def show(value: object) -> str:
    """A value as an error message prints it: its repr, cut to 160 characters
    by eliding the middle, so a long path keeps its file name."""
    text = repr(value)
    return text if len(text) <= 160 else text[:60] + "..." + text[-97:]


def closest(word: object, choices, what: str = "") -> str:
    """The end of an "unknown ..." message: the nearest valid choice
    (difflib) as "did you mean X?", else the choices themselves when there
    are a few (at most 12), else where to find them (`what`)."""
    choices = [str(c) for c in choices]
    near = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]}?"
    if len(choices) <= 12 or not what:
        return f"choose from {', '.join(choices)}"
    return f"see {what}"
