import sys

with open(snakemake.log[0], "w") as log:  # noqa: F821
    log.write("about to exit with 3\n")
print("exiting on stdout")
sys.exit(3)
