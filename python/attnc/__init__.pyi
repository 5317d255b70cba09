import os
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

Source = Union[str, "os.PathLike[str]"]
ArrayLike = Any  # a NumPy array, or any object with `__dlpack__` (PyTorch, JAX)

class CompileError(Exception):
    """A program with errors; `str()` renders them as `attnc check` does."""

    diagnostics: list[Diagnostic]

class RunError(Exception):
    """A run-time error with the command line's message."""

    code: Optional[str]

class Diagnostic:
    code: str
    severity: str
    message: str
    line: int
    column: int
    hint: Optional[str]

class Binding:
    kind: str
    name: str
    shape: str
    contiguous: bool
    strides: Optional[str]
    sizes: Optional[list[int]]

class Function:
    """A compiled program: call it with inputs by keyword or in declaration order."""

    @property
    def inputs(self) -> list[str]: ...
    @property
    def outputs(self) -> list[str]: ...
    @property
    def plans(self) -> list[dict[str, Any]]: ...
    def __call__(self, *args: ArrayLike, **kwargs: ArrayLike) -> dict[str, npt.NDArray[np.float32]]: ...
    def state(self, name: str) -> npt.NDArray[np.float32] | None: ...
    def reset_state(self) -> None: ...
    def _input_addresses(self, *args: ArrayLike, **kwargs: ArrayLike) -> list[int]: ...

class Plot(bytes):
    def _repr_png_(self) -> bytes: ...
    def save(self, path: Source) -> None: ...

def check(path_or_source: Source, dims: Optional[Mapping[str, int]] = None) -> list[Binding]: ...
def compile(
    path_or_source: Source,
    dims: Optional[Mapping[str, int]] = None,
    weights: Union[None, Source, Mapping[str, ArrayLike]] = None,
    backend: str = "jit",
    threads: Optional[int] = None,
    seed: int = 0,
    max_memory: Optional[int] = None,
) -> Function: ...
def plot(
    array: ArrayLike,
    name: str = "attn",
    *,
    batch: int = 0,
    heads: Union[None, int, Tuple[int, int]] = None,
    queries: Optional[Sequence[str]] = None,
    keys: Optional[Sequence[str]] = None,
) -> Plot: ...
