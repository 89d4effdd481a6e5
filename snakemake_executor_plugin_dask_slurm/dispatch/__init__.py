"""One Snakemake job, one Dask task: admit it (:mod:`.admission`), build its command
(:mod:`.job_commands`), register and hand it over (:mod:`.registry`, :mod:`.dispatcher`),
bring back its outcome and settle it, and deal with jobs whose worker died
(:mod:`.recovery`). Both ends are one call each from the executor (:mod:`.ends`)."""
