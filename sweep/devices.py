"""Devices for a sweep: one mesh over every visible device, in one or more
processes (jax.distributed). The configuration axis is sharded over it."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sweep.schema import SpecError


def join_cluster(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join a jax.distributed cluster (before any computation)."""
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--coordinator", coordinator, "must be HOST:PORT")
    if num_processes < 1:
        raise SpecError("--num-processes", num_processes, "must be >= 1")
    if not 0 <= process_id < num_processes:
        raise SpecError("--process-id", process_id, f"must be in 0..{num_processes - 1}")
    # CPU processes exchange results over gloo; GPUs use their own collectives.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)


@dataclasses.dataclass(frozen=True)
class Devices:
    mesh: Mesh
    sharded: NamedSharding  # [C] arrays: configurations split over devices
    replicated: NamedSharding

    @property
    def count(self) -> int:
        return self.mesh.devices.size

    @property
    def leader(self) -> bool:
        """Whether this process writes output (process 0)."""
        return jax.process_index() == 0

    def put(self, params: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """Global arrays from host arrays that every process holds in full:
        [C] arrays split over devices, [1] arrays (constants) replicated."""
        shardings = {k: self.replicated if v.shape == (1,) else self.sharded for k, v in params.items()}
        if jax.process_count() == 1:
            return jax.device_put(params, shardings)
        return {k: jax.make_array_from_callback(v.shape, shardings[k], lambda idx, v=v: v[idx])
                for k, v in params.items()}

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


def visible_devices() -> Devices:
    mesh = Mesh(np.array(jax.devices()), ("config",))
    return Devices(mesh, NamedSharding(mesh, PartitionSpec("config")), NamedSharding(mesh, PartitionSpec()))
