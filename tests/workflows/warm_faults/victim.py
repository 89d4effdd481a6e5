# script_victim's script: runs (warm: in a process forked from the zygote) while the test
# kills the warm processes.
import os
import time

for step in range(1, 11):
    with open("script_events.log", "a") as log:
        log.write(f"script_victim {os.getpid()} {step} {time.time()}\n")
    with open(snakemake.output[0], "a") as f:  # noqa: F821
        f.write(f"{step} {os.getpid()}\n")
    time.sleep(0.3)
