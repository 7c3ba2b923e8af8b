"""Devices for a sweep: one mesh over every visible device, in one or more
processes (jax.distributed). The configuration axis is sharded over it."""
from __future__ import annotations

import dataclasses
import functools
import math
import socket
import time

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sweep.engine import interrupt
from sweep.errors import SpecError


def join_cluster(coordinator: str, num_processes: int, process_id: int, timeout: float = 60.0) -> None:
    """Join a jax.distributed cluster (before any computation). A coordinator
    that cannot be reached, or processes that do not all join, within
    `timeout` seconds are a SpecError naming the coordinator."""
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SpecError("--coordinator", coordinator, "must be HOST:PORT")
    if num_processes < 1:
        raise SpecError("--num-processes", num_processes, "must be >= 1")
    if not 0 <= process_id < num_processes:
        raise SpecError("--process-id", process_id, f"must be in 0..{num_processes - 1}")
    try:
        socket.getaddrinfo(host, int(port))
    except OSError as err:
        raise SpecError("--coordinator", coordinator, f"unknown host ({err.strerror or err})") from None
    # JAX waits for its peers without a word and then aborts the process (a
    # C++ check, not an exception). So the processes first meet on the
    # coordinator's port with a plain TCP handshake that can time out cleanly;
    # process 0 then hands the port to JAX's coordination service.
    _rendezvous(coordinator, host, int(port), num_processes, process_id, timeout)
    # CPU processes exchange results over gloo; GPUs use their own collectives.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id,
                               initialization_timeout=max(60, math.ceil(timeout)))


_HELLO = b"ssgd-sweep join "


def _rendezvous(coordinator: str, host: str, port: int, num_processes: int, process_id: int,
                timeout: float) -> None:
    """Every process reaches process 0 within `timeout` s, or SpecError."""
    deadline = time.monotonic() + timeout
    left = lambda: max(0.01, deadline - time.monotonic())  # noqa: E731
    if num_processes == 1:
        return
    if process_id == 0:
        try:
            family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
            server = socket.create_server(("", port), family=family, dualstack_ipv6=family == socket.AF_INET6)
        except OSError as err:
            raise SpecError("--coordinator", coordinator, f"cannot listen on port {port} "
                                                          f"({err.strerror or err})") from None
        joined: dict[int, socket.socket] = {}
        try:
            while len(joined) < num_processes - 1:
                if time.monotonic() >= deadline:
                    missing = sorted(set(range(1, num_processes)) - set(joined))
                    raise SpecError("--coordinator", coordinator,
                                    f"{len(joined)} of {num_processes - 1} other processes joined within "
                                    f"{timeout:g} s (missing: {', '.join(map(str, missing[:8]))}); start them with "
                                    "the same --coordinator, or raise --coordinator-timeout")
                interrupt.check()  # Ctrl-C while waiting for the others
                server.settimeout(min(0.5, left()))
                try:
                    conn, _ = server.accept()
                except socket.timeout:
                    continue
                conn.settimeout(left())
                try:
                    hello = conn.recv(64)
                except OSError:
                    conn.close()
                    continue
                rank = hello[len(_HELLO):].strip()
                if hello.startswith(_HELLO) and rank.isdigit() and 0 < int(rank) < num_processes:
                    joined[int(rank)] = conn
                else:
                    conn.close()
            for conn in joined.values():
                conn.sendall(b"go\n")
        finally:
            for conn in joined.values():
                conn.close()
            server.close()
        return
    while True:
        interrupt.check()
        try:
            conn = socket.create_connection((host, port), timeout=min(5.0, left()))
        except OSError as err:
            if time.monotonic() >= deadline:
                raise SpecError("--coordinator", coordinator,
                                f"not reachable within {timeout:g} s ({err.strerror or err}); start process 0 "
                                "first, check HOST:PORT, or raise --coordinator-timeout") from None
            time.sleep(min(0.2, left()))
            continue
        try:
            conn.sendall(_HELLO + str(process_id).encode() + b"\n")
            while True:  # wait for "go" in short slices, so Ctrl-C is heard
                interrupt.check()
                conn.settimeout(min(0.5, left()))
                try:
                    if conn.recv(16).startswith(b"go"):
                        return
                    break  # closed without "go": process 0 gave up
                except socket.timeout:
                    if time.monotonic() >= deadline:
                        break
        except OSError:
            pass
        finally:
            conn.close()
        if time.monotonic() >= deadline:
            raise SpecError("--coordinator", coordinator,
                            f"the other processes did not all join within {timeout:g} s; "
                            "start them with the same --coordinator, or raise --coordinator-timeout")
        time.sleep(min(0.2, left()))


@dataclasses.dataclass(frozen=True)
class Devices:
    mesh: Mesh
    sharded: NamedSharding  # [C] arrays: configurations split over devices
    replicated: NamedSharding

    @property
    def count(self) -> int:
        return self.mesh.devices.size

    @property
    def platforms(self) -> set[str]:
        return {d.platform for d in self.mesh.devices.flat}

    @property
    def leader(self) -> bool:
        """Whether this process writes output (process 0)."""
        return jax.process_index() == 0

    def replicate(self, tree):
        """Host arrays (any pytree) as global arrays held whole by every device."""
        if all(d.process_index == jax.process_index() for d in self.mesh.devices.flat):
            return jax.device_put(tree, self.replicated)
        return jax.tree.map(lambda v: jax.make_array_from_callback(np.shape(v), self.replicated,
                                                                   lambda idx, v=np.asarray(v): v[idx]), tree)

    def agree_tree(self, tree):
        """Process 0's host arrays (any pytree), on every process."""
        if jax.process_count() == 1:
            return tree
        return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(tree))

    def fetch(self, out: dict[str, jax.Array]) -> dict[str, np.ndarray]:
        """Whole results on the host (gathered from every process)."""
        if jax.process_count() == 1:
            return {k: np.asarray(v) for k, v in out.items()}
        return {k: np.asarray(v) for k, v in multihost_utils.process_allgather(out, tiled=True).items()}

    def agree(self, mask: np.ndarray) -> np.ndarray:
        """Process 0's value of `mask`, on every process."""
        if jax.process_count() == 1:
            return mask
        return np.asarray(multihost_utils.broadcast_one_to_all(mask))


@functools.lru_cache(maxsize=None)
def single_device(device) -> Devices:
    """A one-device view (for work that a device does alone); one per
    device, so that programs taking its sharding as a static argument
    compile once."""
    mesh = Mesh(np.array([device]), ("config",))
    return Devices(mesh, NamedSharding(mesh, PartitionSpec("config")), NamedSharding(mesh, PartitionSpec()))


def visible_devices() -> Devices:
    mesh = Mesh(np.array(jax.devices()), ("config",))
    return Devices(mesh, NamedSharding(mesh, PartitionSpec("config")), NamedSharding(mesh, PartitionSpec()))
