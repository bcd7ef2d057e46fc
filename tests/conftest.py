"""Test-wide settings: the compiled kernels must build (never a silent fallback in CI), and every
test starts from the same random state."""

import os

import kernel_tests
import pytest

os.environ.setdefault("CTRLRNN_REQUIRE_COMPILED", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runtime", choices=("tuned", "plain"), default=None,
        help="the CPU runtime behind the compiled kernels for this run (sets CTRLRNN_RUNTIME; "
             "scripts/test runs the kernel suites under `plain` as well)")
    parser.addoption(
        "--other-python", metavar="PATH", default=None,
        help="an interpreter of another CPython version (3.10-3.13) with a torch of this "
             "torch's release (its CPU or CUDA build): tests/install/test_wheel_other_python.py "
             "installs the abi3 wheel there and runs its kernels (skipped without it)")
    kernel_tests.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    # before any test module imports ctrlrnn, so the first extension loaded is configured so,
    # and in every xdist worker and child process alike
    chosen = config.getoption("--runtime")
    if chosen:
        os.environ["CTRLRNN_RUNTIME"] = chosen
    folder = config.getoption("--record-kernel-tests")
    if folder:
        config.pluginmanager.register(kernel_tests.Recorder(folder), "kernel-tests-recorder")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kernel_tests.select(config, items)


def pytest_report_header(config: pytest.Config) -> str:
    return f"ctrlrnn CPU runtime: {os.environ.get('CTRLRNN_RUNTIME') or 'tuned'}"


@pytest.fixture
def tuned_runtime():
    """The tuned CPU runtime for one test, whatever ``--runtime`` says: for the tests of its
    own machinery (the output cache, the GEMM paths, streaming stores)."""
    from ctrlrnn.ops import runtime

    with runtime.using("tuned"):
        yield
# training in the tests runs on the CPU even where a GPU is visible: the tests compare runs
# bitwise (resume, torchrun against one process), which CUDA's atomics would not give
os.environ.setdefault("CTRLRNN_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seeded_rngs() -> None:
    """Seed Python's, numpy's and torch's generators before each test (the training command's own
    ``seed_everything``), so a failure reproduces on rerun.

    A test that draws unseeded inputs and compares two float32 paths would otherwise fail at
    random, once in some hundreds of runs, where the inputs happen to land near a rounding edge.
    """
    from ctrlrnn.train.cli import seed_everything  # after the environment above is set

    seed_everything(0)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): their shapes are tiny, so the compiled kernels run inline. On a loaded
    machine a 2-thread ``at::parallel_for`` region over a few elements can wait milliseconds for
    its second thread, which makes many small calls (gradcheck, tiny training runs) slow; the
    results are the same."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def scripted_trainer(tmp_path):
    """A factory of tiny copy-task trainers (in ``tmp_path``) whose validation metrics follow
    scripted curves: ``make({name: values}, **overrides) -> (trainer, calls)``. Each full
    validation evaluation takes the next value of every curve (its last one once spent);
    ``calls`` counts them (``"valid"``) and the trainer's one-batch check of a ``monitor``
    other than the task's metric (``"probe"``), which takes none."""
    from ctrlrnn.train.cli import seed_everything, validated_config
    from ctrlrnn.train.trainer import Trainer

    def make(curves: dict, **overrides):
        base = {"max_steps": 50, "epochs": 100, "batch_size": 16, "eval_every": 1,
                "checkpoint_every": 1000, "log_every": 1000, "task.train_size": 64,
                "task.valid_size": 16, "task.test_size": 16, "task.digits": 2,
                "model.hidden_size": 4, "out": str(tmp_path)}
        cfg, cls = validated_config("copy", "lstm", {**base, **overrides})
        seed_everything(0)
        task = cls(cfg.task_args, 0)
        task.setup()
        model = task.build_model(cfg.model, cfg.model_args)
        scripted = {name: iter(values) for name, values in curves.items()}
        real = task.evaluate
        calls = {"valid": 0, "probe": 0}

        def evaluate(model, split, limit):
            metrics = real(model, split, limit)
            if split == "valid" and limit == 1:
                calls["probe"] += 1
            elif split == "valid":
                calls["valid"] += 1
                for name, values in scripted.items():
                    metrics[name] = next(values, curves[name][-1])
            return metrics

        task.evaluate = evaluate
        return Trainer(cfg, task, model, tmp_path, show_progress=False), calls

    return make
