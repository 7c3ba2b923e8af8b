"""The kernels' parameter contract (`kernels.parameters.Params`): one typed
pytree whose optional fields switch the richer models on."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.collectives import EXTRA_LINK_FIELDS, LINK_FALLBACK, collective_cost
from kernels.parameters import NAMES, OPTIONAL, REQUIRED, Params
from sweep.engine.params import point_params
from sweep.graph import zoo
from sweep.scenario.parameter_table import LINK_TABLES, PARAMETERS
from sweep.scenario.sensitivity import tangent_rule


def plain(**changes):
    return point_params({"model": "alexnet", "batch_size": 8, "nodes": 2, "gpus_per_node": 4, **changes},
                        zoo.get_model("alexnet"))


def test_a_misspelt_or_missing_parameter_is_named():
    values = dict(plain())
    with pytest.raises(TypeError, match="unknown kernel parameter 'inter_bandwith'; did you mean 'inter_bandwidth'"):
        Params.of({**values, "inter_bandwith": values["inter_bandwidth"]})
    del values["workers"]
    with pytest.raises(TypeError, match="missing kernel parameter 'workers'"):
        Params.of(values)


def test_it_reads_as_a_mapping_of_its_set_fields():
    p = plain()
    assert set(p) == set(REQUIRED) and len(p) == len(REQUIRED)
    assert "ps_pipelined" not in p and p.ps_pipelined is None and p.get("ps_pipelined") is None
    with pytest.raises(KeyError):
        p["ps_pipelined"]
    q = plain(**{"ps.pipelined": True, "algorithm": "ps"})
    assert "ps_pipelined" in q and float(q["ps_pipelined"][0]) == 1.0
    assert Params.of(q) is q and Params.of(dict(q)).keys() == q.keys()


def test_unset_fields_are_not_leaves_and_jit_specialises_on_them():
    p, q = plain(), plain(**{"ps.pipelined": True, "algorithm": "ps"})
    assert len(jax.tree_util.tree_leaves(p)) == len(REQUIRED)
    assert len(jax.tree_util.tree_leaves(q)) == len(REQUIRED) + 1
    traces = []

    @jax.jit
    def latency(params):
        traces.append(params.ps_pipelined is None)
        return collective_cost(params).latency

    latency(p), latency(p), latency(q)
    assert traces == [True, False]  # one trace per set of fields, not per call


def test_every_field_a_table_names_exists():
    """The scenario-key table, the link fallbacks and the sensitivities' tangent
    rules name fields of Params, so a new parameter is declared in one place each."""
    assert {p.name for p in PARAMETERS} <= set(NAMES)
    links = {f"{t}_{f}" for t in LINK_TABLES for f in (*LINK_FALLBACK, *EXTRA_LINK_FIELDS, "line_rate")}
    assert links <= set(OPTIONAL)
    for key in ("nodes", "gpus_per_node", "inter.bandwidth"):
        for servers_given in (False, True):
            assert {name for rule in tangent_rule(key, servers_given) for name in rule if name} <= set(NAMES)


def test_replace_keeps_the_contract():
    p = plain()
    q = p.replace(inter_bandwidth=jnp.asarray([2e9], jnp.float32))
    assert float(q.inter_bandwidth[0]) == 2e9 and float(p.inter_bandwidth[0]) != 2e9
    with pytest.raises(TypeError):
        p.replace(inter_bandwith=np.ones(1))
