"""attnc: compile `.attn` attention programs, shapes proved before anything runs.

    import attnc
    f = attnc.compile("examples/mha.attn", dims={"D": 64, "H": 4}, weights=model.state_dict())
    out = f(query=q, key=k, value=v, mask=m)["out"]

`check` returns the bindings `attnc check` prints; `compile` returns a `Function` that
compiles once per set of sizes and keeps the plan; `plot` draws attention heatmaps.
"""

from ._attnc import (
    Binding,
    CompileError,
    Diagnostic,
    Function,
    RunError,
    __version__,
    _plot_png,
    check,
    compile,
)

__all__ = ["Binding", "CompileError", "Diagnostic", "Function", "Plot", "RunError", "check", "compile", "plot"]


class Plot(bytes):
    """The PNG bytes of a heatmap, as `attnc plot` writes them; a notebook shows it."""

    def _repr_png_(self):
        return bytes(self)

    def save(self, path):
        """Write the PNG to `path`."""
        with open(path, "wb") as f:
            f.write(self)


def plot(array, name="attn", *, batch=0, heads=None, queries=None, keys=None):
    """Heatmaps of a `[.., N, M]` array (NumPy or `__dlpack__`): one batch element, a grid
    of heads, a colour bar. `heads` is `(start, end)` or one head; `queries` and `keys` are
    tick labels."""
    if isinstance(heads, int):
        heads = (heads, heads + 1)
    return Plot(_plot_png(array, name, batch, heads, queries, keys))


def _rebuild(source, dims, weights, backend, threads, max_memory):
    """A pickled `Function`, compiled again (see `Function.__reduce__`)."""
    return compile(source, dims=dims, weights=weights, backend=backend, threads=threads, max_memory=max_memory)
