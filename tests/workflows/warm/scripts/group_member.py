# A group's script: member (a thread of the group job's Snakemake; warm, its process is
# forked from the zygote and joins the group job's process group).
import os

with open(snakemake.input[0]) as f:  # noqa: F821
    seen = f.read()
with open(snakemake.output[0], "w") as f:  # noqa: F821
    f.write(f"{seen}c {os.getpgrp() != os.getpid()}\n")
