"""What the user is told: about a job that did not succeed, and about settings that slow
the run. Pure: plain values (and Snakemake job objects) in, sentences out."""
