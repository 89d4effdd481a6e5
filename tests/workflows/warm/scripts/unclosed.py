# Files left open, in a script that defines a function (so its globals are in a reference
# cycle): a fresh interpreter closes and flushes them when it ends; a warm script's
# process must too, or they stay empty or truncated.
import gzip

plain, packed = snakemake.output  # noqa: F821
leaked = open(plain, "w")  # noqa: SIM115
leaked.write("written, never closed\n" * 3)
archive = gzip.GzipFile(packed, "wb", mtime=0)
archive.write(b"compressed, never closed\n")


def keeps_them() -> tuple[object, object]:
    return leaked, archive
