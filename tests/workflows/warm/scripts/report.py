with open(snakemake.log[0], "w") as log:
    log.write(f"script log for {snakemake.rule}\n")
with open(snakemake.output[0], "w") as f:
    f.write(f"{snakemake.config['greeting']}|{snakemake.params.obj}|{snakemake.log[0]}\n")
