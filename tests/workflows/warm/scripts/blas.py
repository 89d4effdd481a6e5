# The size of numpy's OpenBLAS thread pool as this script finds it: a fresh interpreter
# sizes it from the job's environment (threads: 1, exported by Snakemake's shell) when
# numpy loads; a warm script's process has the warm process's numpy, loaded long before.
# And the threads of its process: a pool of one has none of its own (a warm script's
# process once had a whole pool started again by the resize, busy for its short life).
import ctypes
import os
import sys

import numpy  # noqa: F401  (loads OpenBLAS)

GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)
sizes = []
with open("/proc/self/maps") as maps:
    paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
for path in paths:
    if ".so" in path:
        library = ctypes.CDLL(path)
        getter = next(name for name in GETTERS if hasattr(library, name))
        sizes.append(getattr(library, getter)())
assert sizes, f"no OpenBLAS found in {paths} (numpy {sys.modules['numpy'].__version__})"
threads = len(os.listdir("/proc/self/task"))
with open(snakemake.output[0], "w") as f:  # noqa: F821
    f.write(f"openblas threads {sizes}; the process has {threads} thread(s)\n")
