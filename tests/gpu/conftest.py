"""Run every Triton kernel of this directory in Triton's CPU interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when ``ctrlrnn.ops.gpu.*_triton``
is first imported; pytest imports this conftest before the test modules of the directory, and
``import ctrlrnn`` never imports Triton, so setting it here is early enough.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
