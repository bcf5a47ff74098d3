"""Settings as tensors: how transforms and stopping criteria hold their parameters.

A batched transform takes each numeric setting as a scalar (every row) or one value per row, and
each token list as one shared list or one list per row. Whatever the caller gives, it is stored
as a tensor: a 0-D or ``[rows]`` tensor for numbers (float64, so that casting to the logits' dtype
rounds exactly as Transformers' Python floats do), a ``[1, S]`` or ``[rows, S]`` long tensor for
token lists (``-1`` pads the shorter lists). A compiled graph then reads settings as data, and a new
request's settings are new tensor values, not a new graph.

Values are checked once, here, at construction; that check reads the values on the host, the only
place where anything does. At call time, :func:`column` and :func:`per_row` shape a parameter for
the logits and :func:`token_ids` expands a token list to every row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Union

import torch

__all__ = [
    "FloatParam",
    "IntParam",
    "TokenIds",
    "check",
    "column",
    "floats",
    "ints",
    "move",
    "per_row",
    "rows_of",
    "tensor_param",
    "token_ids",
    "token_sets",
]

FloatParam = Union[float, Sequence[float], torch.Tensor]
IntParam = Union[int, Sequence[int], torch.Tensor]
TokenIds = Union[int, Sequence[int], Sequence[Sequence[int]], torch.Tensor]


def tensor_param(name: str, value: object, dtype: torch.dtype) -> torch.Tensor:
    """A scalar or per-row setting as a 0-D or 1-D tensor (float64 or long)."""
    kinds: tuple[type, ...] = (int, float) if dtype.is_floating_point else (int,)
    what = "a number" if dtype.is_floating_point else "an int"
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        listed = isinstance(value, Iterable) and not isinstance(value, (str, bytes))
        items = list(value) if listed else [value]  # type: ignore[call-overload]
        if any(isinstance(v, bool) or not isinstance(v, kinds) for v in items):
            raise ValueError(f"{name} must be {what} or one per row, got {value!r}")
        tensor = torch.tensor(items if listed else value, dtype=dtype)
    if tensor.dim() > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D tensor, got {tensor.dim()}-D")
    if dtype.is_floating_point:
        if not tensor.dtype.is_floating_point:
            tensor = tensor.to(dtype)
    elif tensor.dtype.is_floating_point or tensor.dtype == torch.bool:
        raise ValueError(f"{name} must hold integers, got {tensor.dtype}")
    else:
        tensor = tensor.to(torch.long)
    return tensor


def check(name: str, tensor: torch.Tensor, ok: torch.Tensor, expectation: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``ok`` holds everywhere."""
    if not bool(ok.all()):
        raise ValueError(f"{name} must be {expectation}, got {tensor.tolist()!r}")


def floats(
    name: str, value: object, low: float, high: float, *, closed: str = "[]"
) -> torch.Tensor:
    """A float setting within ``low``..``high`` (``closed`` says which ends are included)."""
    tensor = tensor_param(name, value, torch.float64)
    lo_ok = tensor >= low if closed[0] == "[" else tensor > low
    hi_ok = tensor <= high if closed[1] == "]" else tensor < high
    check(name, tensor, lo_ok & hi_ok, f"in {closed[0]}{low}, {high}{closed[1]}")
    return tensor


def ints(name: str, value: object, low: int) -> torch.Tensor:
    """An int setting of at least ``low``."""
    tensor = tensor_param(name, value, torch.long)
    check(name, tensor, tensor >= low, f">= {low}")
    return tensor


def token_sets(name: str, ids: object) -> torch.Tensor:
    """Token ids as ``[1, S]`` (one list for every row) or ``[rows, S]`` (a list per row, ``-1``
    padding): from an id, a list of ids, a list of lists, or a 1-D / 2-D tensor."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() not in (1, 2):
            raise ValueError(f"{name} must be a 1-D or 2-D integer tensor of token ids")
        tensor = ids.to(torch.long)
        tensor = tensor.reshape(1, -1) if tensor.dim() == 1 else tensor
        check(name, tensor, tensor >= -1, "token ids (>= 0; -1 pads per-row lists)")
        return tensor
    if isinstance(ids, bool):
        raise ValueError(f"{name} must be token ids, got {ids!r}")
    if isinstance(ids, int):
        ids = [ids]
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ValueError(f"{name} must be token ids, got {ids!r}")
    items = list(ids)
    nested = bool(items) and all(
        isinstance(item, Iterable) and not isinstance(item, (str, bytes)) for item in items
    )
    rows = [list(item) for item in items] if nested else [items]
    for row in rows:
        for token in row:
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(f"{name} must hold token ids (ints >= 0), got {token!r}")
    width = max((len(r) for r in rows), default=0)
    padded = [r + [-1] * (width - len(r)) for r in rows]
    return torch.tensor(padded, dtype=torch.long).reshape(len(rows), width)


def column(
    param: torch.Tensor, logits: torch.Tensor, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A parameter shaped to broadcast against ``[rows, V]`` logits (in their dtype by default)."""
    param = param.to(device=logits.device, dtype=dtype or logits.dtype)
    if param.dim() == 1:
        if param.shape[0] != logits.shape[0]:
            raise ValueError(
                f"a per-row parameter has {param.shape[0]} values for {logits.shape[0]} rows"
            )
        return param.unsqueeze(1)
    return param


def divide_as_by_a_float(
    x: torch.Tensor, divisor: torch.Tensor, in_place: bool = False
) -> torch.Tensor:
    """``x / divisor`` rounded as PyTorch rounds ``x / d`` for a Python float ``d``, which is how
    Transformers' processors divide.

    The CPU divides. CUDA multiplies by the reciprocal instead: the host rounds ``1 / d`` to the
    compute precision, then the device rounds the product. The same float therefore gives other
    low bits there, and equality with a processor on each device needs each device's rule.
    ``divisor`` holds the per-row values in ``x``'s compute precision (a ``float`` is taken as
    float32 for float32 and narrower logits). ``in_place`` writes the quotient over ``x``.

    The reciprocal is taken in float64 and rounded once to the compute precision: that equals the
    host's correctly rounded float32 ``1 / d`` (a quotient of 24-bit numbers never lies within
    float64 rounding of a float32 tie), whatever the device's own float32 division does.
    """
    if x.device.type == "cuda":
        inverse = torch.reciprocal(divisor.to(torch.float64)).to(divisor.dtype)
        return x.mul_(inverse) if in_place else x * inverse
    return x.div_(divisor) if in_place else x / divisor


def compute_dtype(logits: torch.Tensor) -> torch.dtype:
    """The precision PyTorch computes ``logits`` op a Python float in (float32 for half types)."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def per_row(
    param: torch.Tensor, logits: torch.Tensor, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A parameter as one value per row, ``[rows]``."""
    return column(param, logits, dtype).reshape(-1).expand(logits.shape[0])


def rows_of(ids: torch.Tensor, rows: int, device: torch.device) -> torch.Tensor:
    """A token-set tensor expanded to ``[rows, S]`` on ``device``."""
    ids = ids.to(device)
    if ids.shape[0] not in (1, rows):
        raise ValueError(f"per-row token lists have {ids.shape[0]} rows for {rows} rows")
    return ids.expand(rows, ids.shape[1])


def token_ids(ids: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sets as ``[rows, S]`` ids, with the mask of the usable ones (real ids inside the
    logits)."""
    ids = rows_of(ids, logits.shape[0], logits.device)
    return ids, (ids >= 0) & (ids < logits.shape[1])


def move(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor`` on ``device``; from host to a CUDA device through pinned memory, without blocking
    the host (a pageable copy would wait for the device's queue)."""
    target = torch.device(device)
    if tensor.device == target:
        return tensor
    if tensor.device.type == "cpu" and target.type == "cuda":
        return tensor.pin_memory().to(target, non_blocking=True)
    return tensor.to(target)
