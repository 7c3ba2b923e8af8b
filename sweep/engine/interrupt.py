"""Stopping a sweep cleanly on SIGINT (Ctrl-C) and SIGTERM.

A Python exception raised from inside a signal handler can land anywhere: in
an h5py call half-way through a write, in a JAX callback (where it is
"ignored" and the sweep runs on), or during interpreter shutdown (a crash).
So while a sweep runs, the handlers only record the signal, and the sweep
checks the record between chunks (`check_all`), after the chunk in hand is
written and journaled: it then raises `Interrupted`, the store closes its
file, and the command exits 130 (SIGINT) or 143 (SIGTERM). In a cluster the
processes agree after every chunk, so a signal to any of them stops all.
"""
from __future__ import annotations

import contextlib
import signal
import threading

import jax
import numpy as np
from jax.experimental import multihost_utils

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Interrupted(BaseException):
    """A sweep stopped between chunks on a signal; `status` is the exit status (128 + signal)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.status = 128 + signum
        super().__init__(signal.Signals(signum).name)


def _record(signum, frame) -> None:
    _received.append(signum)


def requested() -> int | None:
    """The first signal received while handlers were installed, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise Interrupted if a stop was requested (call between chunks only)."""
    if _received:
        raise Interrupted(_received[0])


def check_all() -> None:
    """`check` for every process of a cluster at once: all stop if any was
    signalled (a collective: every process calls it at the same point)."""
    if jax.process_count() == 1:
        return check()
    flags = multihost_utils.process_allgather(np.array([_received[0] if _received else 0], np.int32))
    first = int(np.max(flags))
    if first:
        raise Interrupted(first)


@contextlib.contextmanager
def deferred_signals():
    """Record SIGINT and SIGTERM instead of acting on them, for the duration.
    Outside the main thread (where handlers cannot be installed) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {s: signal.signal(s, _record) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _received.clear()
