"""A module of the workflow's own, imported by a run: rule."""


def double(x):
    return 2 * x
