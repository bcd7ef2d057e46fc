"""Compile one ctrlrnn extension; run as a script, in a child process, by :mod:`._extension`.

The argument is a JSON object: ``module`` (the extension module's name), ``sources``,
``include_dirs``, ``cflags``, ``ldflags`` and ``build_dir``. The parent captures everything this
process prints into the build log; the last line ``CTRLRNN_LIBRARY=<path>`` names the library
built (a plain shared library that registers its ops with ``TORCH_LIBRARY``, loaded once here
with ``torch.ops.load_library``, so a library that cannot load counts as a failed build).

The parent starts the worker as the leader of a new process group, which ninja joins. The
worker ends on SIGTERM by passing it to ninja (which ends its compilers) and then killing the
group. It gets SIGTERM when the parent dies (Linux: ``PR_SET_PDEATHSIG``) or stops the build,
so a build whose process was killed leaves no compiler behind. The
parent holds the build folder's lock for the whole build, so the ``lock`` file torch's builder
leaves in the folder when killed is stale by the time the next worker starts, and is removed.
"""

import ctypes
import json
import os
import signal
import sys
import time

#: Seconds ninja gets to end its compilers before the worker's group is killed.
GRACE_S = 2.0


def _end_group(signum: int, frame: object) -> None:
    """End this worker's process group and the compilers ninja started. Ninja runs each
    compiler in a process group of its own and ends those groups when it gets SIGTERM, so the
    group gets SIGTERM first, and SIGKILL once ninja has had time to pass it on."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(0, signal.SIGKILL)


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    signal.signal(signal.SIGTERM, _end_group)
    signal.signal(signal.SIGHUP, _end_group)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call: nothing would kill us later
        sys.exit(1)


def build(spec: dict) -> str:
    """Compile and load the extension ``spec`` describes; the path of its library. Recent
    torch builders return that path and older ones (torch 2.4's) nothing, so it is then taken
    from where the builder writes it: ``build_dir/module`` with the platform's library suffix."""
    from torch.utils import cpp_extension

    library = cpp_extension.load(
        name=spec["module"],
        sources=spec["sources"],
        extra_include_paths=spec.get("include_dirs", []),
        extra_cflags=spec["cflags"],
        extra_ldflags=spec["ldflags"],
        build_directory=spec["build_dir"],
        verbose=True,
        is_python_module=False,
    )
    if library is None:
        library = os.path.join(spec["build_dir"], spec["module"] + cpp_extension.LIB_EXT)
    return str(library)


def main(argv: list) -> int:
    _die_with_parent()
    spec = json.loads(argv[1])
    # torch's builder waits forever on a `lock` file left by a killed build; the parent's lock
    # on the folder makes any such file stale here
    stale = os.path.join(spec["build_dir"], "lock")
    if os.path.exists(stale):
        os.remove(stale)
    print(f"CTRLRNN_LIBRARY={build(spec)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
