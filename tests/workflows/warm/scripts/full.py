# Writes its output, then stdout to a full disk: the interpreter's final flush fails and
# it exits with 120 (so the job fails and Snakemake removes the output), warm or not.
import sys

with open(snakemake.output[0], "w") as f:  # noqa: F821
    f.write("written before the disk was full\n")
sys.stdout = open("/dev/full", "w")  # noqa: SIM115
print("lost")
