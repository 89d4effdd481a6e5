import os
import subprocess

# The script's own interpreter runs inside the module environment shell() built for it.
said = subprocess.run(["tool", "script"], capture_output=True, text=True, check=True).stdout
with open(snakemake.output[0], "w") as out:
    out.write(f"{os.environ.get('TOOL_VERSION', 'none')} {said}")
