with open(snakemake.log[0], "w") as log:  # noqa: F821
    log.write("about to fail\n")


def deeper() -> None:
    raise ValueError("script fails on purpose")


deeper()
