# The script's last lines run in a non-daemon thread after its main code ended, and it
# forks a short-lived daemon: the interpreter waits for the thread, not the daemon.
import os
import threading
import time


def later() -> None:
    busy = time.process_time() + 0.5  # CPU the job's usage must count, warm as cold
    while time.process_time() < busy:
        pass
    with open(snakemake.output[0], "w") as f:  # noqa: F821
        f.write(f"written by the thread; daemon forked {forked}\n")


pid = os.fork()
if pid == 0:
    os.setsid()
    time.sleep(0.2)
    os._exit(0)
forked = pid > 0
threading.Thread(target=later).start()
