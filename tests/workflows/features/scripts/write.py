with open(snakemake.output[0], "w") as f:  # noqa: F821 (injected by Snakemake)
    f.write(f"{snakemake.params.word} rule={snakemake.rule}\n")  # noqa: F821
