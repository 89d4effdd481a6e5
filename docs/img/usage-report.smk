# The workflow behind docs/img/usage-report.png (a real local run's usage report). Retake:
#   d=$(mktemp -d) && cp docs/img/usage-report.smk $d/Snakefile && cd $d &&
#   nice <repo>/.venv/bin/snakemake --executor dask-slurm --jobs 100 --dask-slurm-cpus 8 --dask-slurm-workers 2 &&
#   chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
#     --disable-background-networking --disable-component-update --disable-sync \
#     --user-data-dir=$(mktemp -d) --hide-scrollbars --window-size=1300,1120 \
#     --virtual-time-budget=10000 --screenshot=<repo>/docs/img/usage-report.png \
#     file://$d/.snakemake/dask-slurm/usage/latest/report.html
# A small sweep for the usage report's picture: a rule that asks for more threads than it
# keeps busy, one that sleeps, one that holds memory, many thin ones, one that fails once
# and is retried, and a final plot.
import sys

PY = sys.executable
BURN = "import sys; n = 0\nfor _ in range(int(sys.argv[1])): n += 1"
N = 120


rule all:
    input:
        "plot.txt",


rule burn:
    output:
        "burn/{b}.txt",
    threads: 4
    params:
        py=PY,
        burn=BURN,
    shell:
        "{params.py} -c {params.burn:q} 8000000; echo {wildcards.b} > {output}"


rule sleepy:
    output:
        "sleepy/{s}.txt",
    threads: 2
    resources:
        runtime=30,
    shell:
        "sleep 2; echo {wildcards.s} > {output}"


rule hold:
    input:
        "burn/{h}.txt",
    output:
        "hold/{h}.txt",
    resources:
        mem_mb=1000,
    params:
        py=PY,
    shell:
        "{params.py} -c 'import time; b = bytearray(200 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(4)'; "
        "echo held > {output}"


rule thin:
    output:
        "thin/{i}.txt",
    resources:
        mem_mb=500,
    shell:
        "echo {wildcards.i} > {output}"


rule flaky:
    input:
        "thin/{f}.txt",
    output:
        "flaky/{f}.txt",
    retries: 1
    shell:
        "if [ ! -e flaky/{wildcards.f}.tried ]; then mkdir -p flaky; touch flaky/{wildcards.f}.tried; sleep 1; exit 1; fi; "
        "sleep 1; echo ok > {output}"


rule plot:
    input:
        expand("burn/{b}.txt", b=range(2)),
        expand("sleepy/{s}.txt", s=range(6)),
        expand("hold/{h}.txt", h=range(2)),
        expand("thin/{i}.txt", i=range(N)),
        expand("flaky/{f}.txt", f=range(2)),
    output:
        "plot.txt",
    params:
        py=PY,
    shell:
        "{params.py} -c 'import time; t = time.time()\nwhile time.time() - t < 2: pass'; echo done > {output}"
