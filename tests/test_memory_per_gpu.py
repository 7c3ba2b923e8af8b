"""`memory_per_gpu` and `fits_in_memory` (kernels.memory) against hand-computed
cases: the ZeRO paper's 7.5B example, AlexNet's activations from its layer
shapes, and checkpointing on a small model."""
import numpy as np
import pytest
import xarray as xr

GB = 1e9


def run(cli, write_spec, tmp_path, text: str) -> xr.Dataset:
    out = tmp_path / "out.nc"
    status, _, stderr = cli("run", write_spec(text), "-o", out)
    assert status == 0, stderr
    with xr.open_dataset(out) as data:
        return data.load()


def one_layer_model(tmp_path, params: int, output_bytes: float = 0.0):
    path = tmp_path / "model.csv"
    path.write_text(f"name,params,forward_flops,output_bytes\nall,{params},1e9,{output_bytes}\n")
    return path.name


def test_zero_papers_example(cli, write_spec, tmp_path):
    """Rajbhandari et al. 2020, Figure 1 / section 5: 7.5B parameters, mixed
    precision Adam (K = 12), 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB of
    model states per GPU for stages 0 to 3 (activations left out)."""
    model = one_layer_model(tmp_path, 7_500_000_000)
    data = run(cli, write_spec, tmp_path, f'model = "{model}"\nbatch_size = 1\nnodes = 8\ngpus_per_node = 8\n'
                                          'gpu = "p100"\noptimizer = "adam"\nprecision = "mixed"\nzero = [0, 1, 2, 3]\n')
    memory = data.memory_per_gpu.values
    assert [round(m / GB, 1) for m in memory] == [120.0, 31.4, 16.6, 1.9]
    psi, nd = 7.5e9, 64
    exact = [(2 + 2 + 12) * psi, (2 + 2) * psi + 12 * psi / nd, 2 * psi + (2 + 12) * psi / nd, 16 * psi / nd]
    np.testing.assert_allclose(memory, exact, rtol=1e-6)
    # A 16 GiB P100 holds stages 2 and 3 only.
    assert data.fits_in_memory.values.tolist() == [0, 0, 1, 1]
    assert data.fits_in_memory.attrs["flag_meanings"] == "no yes"


# AlexNet's outputs per image (torchvision, 224x224): five convolutions, three linear layers.
ALEXNET_OUTPUT_ELEMENTS = 64 * 55 * 55 + 192 * 27 * 27 + 384 * 13 * 13 + 256 * 13 * 13 + 256 * 13 * 13 + 4096 + 4096 + 1000
ALEXNET_PARAMS = 61_100_840


@pytest.mark.parametrize("optimizer, state_bytes", [("sgd", 0), ("momentum", 4), ("adam", 8)])
def test_fp32_states_and_activations_of_alexnet(optimizer, state_bytes, cli, write_spec, tmp_path):
    data = run(cli, write_spec, tmp_path, f'model = "alexnet"\nbatch_size = 64\nnodes = [1, 4]\n'
                                          f'optimizer = "{optimizer}"\n')
    expected = ALEXNET_PARAMS * (4 + 4 + state_bytes) + 64 * 4 * ALEXNET_OUTPUT_ELEMENTS
    # Without ZeRO, every GPU holds everything, whatever their number.
    np.testing.assert_allclose(data.memory_per_gpu.values, [expected, expected], rtol=1e-6)


def test_mixed_precision_with_checkpointing(cli, write_spec, tmp_path):
    """Five layers of outputs 10..50 MB: segments of ceil(sqrt(5)) = 3 layers,
    [10, 20, 30] and [40, 50]; kept 30 + 50, plus the largest segment (90);
    half of it in fp16."""
    path = tmp_path / "five.csv"
    path.write_text("name,params,forward_flops,output_bytes\n" + "".join(
        f"l{i},1000000,1e6,{10e6 * i}\n" for i in range(1, 6)))
    data = run(cli, write_spec, tmp_path, 'model = "five.csv"\nbatch_size = 4\noptimizer = "sgd"\n'
                                          'precision = "mixed"\nactivation_checkpointing = [false, true]\n')
    states = 5e6 * (2 + 2 + 4)  # fp16 weights and gradients, fp32 master weights
    full, checkpointed = 150e6, (30e6 + 50e6) + 90e6
    np.testing.assert_allclose(data.memory_per_gpu.values, [states + 4 * full / 2, states + 4 * checkpointed / 2],
                               rtol=1e-6)


def test_fits_against_the_catalog_or_the_given_memory(cli, write_spec, tmp_path):
    model = one_layer_model(tmp_path, 1_500_000_000)  # 18 GB in fp32 with momentum
    data = run(cli, write_spec, tmp_path, f'model = "{model}"\nbatch_size = 1\ngpu = ["k80", "v100"]\n')
    assert data.fits_in_memory.values.tolist() == [0, 1]  # 12 GiB and 32 GiB
    data = run(cli, write_spec, tmp_path, f'model = "{model}"\nbatch_size = 1\n'
                                          '[gpu]\nname = "k80"\nmemory = [17.9e9, 18.1e9]\n')
    assert data.fits_in_memory.values.tolist() == [0, 1]


def test_mixed_precision_computes_on_tensor_cores_and_sends_half_the_bytes(cli, write_spec, tmp_path):
    """A100: 19.5 TFLOP/s FP32, 312 BF16 (catalog); the update stays memory-bound."""
    data = run(cli, write_spec, tmp_path, 'model = "resnet50"\nbatch_size = 64\nnodes = 4\ngpu = "a100"\n'
                                          'precision = ["fp32", "mixed"]\n[inter]\nalpha = 0.0\n')
    update = 16 * 25_557_032 / 2039e9
    compute = data.compute_time.values - update
    assert compute[1] / compute[0] == pytest.approx(19.5 / 312, rel=1e-5)
    comm = data.communication_time.values
    assert comm[1] / comm[0] == pytest.approx(0.5, rel=1e-3)  # latency-free link: bytes alone
    # Given explicitly, the scenario's own values win.
    given = run(cli, write_spec, tmp_path, 'model = "resnet50"\nbatch_size = 64\nnodes = 4\n'
                                           'precision = ["fp32", "mixed"]\ngrad_bytes = 4\n'
                                           '[gpu]\nname = "a100"\npeak_flops = 19.5e12\n[inter]\nalpha = 0.0\n')
    np.testing.assert_allclose(given.compute_time.values, data.compute_time.values[0], rtol=1e-6)
    np.testing.assert_allclose(given.communication_time.values, comm[0], rtol=1e-6)
