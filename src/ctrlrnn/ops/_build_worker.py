"""Compile one ctrlrnn extension; run as a script, in a child process, by :mod:`._extension`.

The argument is a JSON object: ``module`` (the extension module's name), ``sources``, ``cflags``,
``ldflags`` and ``build_dir``. The parent captures everything this process prints into the build
log; the last line ``CTRLRNN_LIBRARY=<path>`` names the library built (and imported once here,
so a library that cannot load counts as a failed build).
"""

import json
import sys


def main(argv: list) -> int:
    spec = json.loads(argv[1])
    from torch.utils import cpp_extension

    module = cpp_extension.load(
        name=spec["module"],
        sources=spec["sources"],
        extra_cflags=spec["cflags"],
        extra_ldflags=spec["ldflags"],
        build_directory=spec["build_dir"],
        verbose=True,
    )
    print(f"CTRLRNN_LIBRARY={module.__file__}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
