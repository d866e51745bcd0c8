"""Layout: SGLang's rank layout for a world, computed locally (no communication).

Wraps pstate_layout_*; also builds the pstate_parallel_config_t that initialize_model_parallel
takes, from keyword arguments named like the C fields (and SGLang's initialize_model_parallel).
"""
from __future__ import annotations

from typing import List, Optional

from . import capi
from ._enums import GroupKind
from ._errors import InvalidArgumentError

#: The keyword arguments of a parallel config, named like pstate_parallel_config_t's fields.
CONFIG_FIELDS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "expert_parallel_size",
    "attention_data_parallel_size",
    "attention_context_parallel_size",
    "moe_data_parallel_size",
    "decode_context_parallel_size",
    "shared_experts_tensor_parallel_size",
)


def make_config(**sizes: Optional[int]) -> "capi.pstate_parallel_config_t":
    """A pstate_parallel_config_t from PSTATE_PARALLEL_CONFIG_INIT plus the sizes given (None
    keeps the default: 1, or 0 for shared_experts_tensor_parallel_size)."""
    cfg = capi.pstate_parallel_config_t()
    for key, value in sizes.items():
        if key not in CONFIG_FIELDS:
            raise InvalidArgumentError(f"unknown parallel size {key!r}; expected one of {', '.join(CONFIG_FIELDS)}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"{key} must be an int, got {type(value).__name__}")
        setattr(cfg, key, value)
    return cfg


class Layout:
    """The groups SGLang's initialize_model_parallel builds for world_size ranks.

    >>> lay = Layout(8, tensor_parallel_size=4, pipeline_parallel_size=2)
    >>> lay.groups(GroupKind.PP)
    [[0, 4], [1, 5], [2, 6], [3, 7]]

    Sizes not given default to 1 (tensor_parallel_size: world_size / pipeline_parallel_size
    when neither tp nor pp is given it is the whole world). Invalid sizes raise
    InvalidArgumentError with the library's explanation.
    """

    def __init__(self, world_size: int, **sizes: Optional[int]) -> None:
        self._handle = None
        self.world_size = int(world_size)
        cfg = make_config(**sizes) if sizes else None
        self._handle = capi.layout_create(self.world_size, cfg)

    def close(self) -> None:
        """Frees the layout (also done when it is garbage collected)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            capi.layout_destroy(handle)

    def __enter__(self) -> "Layout":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: capi may already be gone
            pass

    def _live(self):
        if self._handle is None:
            raise InvalidArgumentError("this Layout was closed")
        return self._handle

    def group_count(self, kind: GroupKind) -> int:
        """Number of groups of kind (0 for kinds this layout does not have)."""
        return capi.layout_group_count(self._live(), int(kind))

    def group_ranks(self, kind: GroupKind, index: int) -> List[int]:
        """Global ranks of group index of kind, ascending."""
        return capi.layout_group_ranks(self._live(), int(kind), index, self.world_size)

    def group_of(self, kind: GroupKind, rank: int) -> int:
        """Index of the group of kind that contains global rank."""
        return capi.layout_group_of(self._live(), int(kind), rank)

    def groups(self, kind: GroupKind) -> List[List[int]]:
        """Every group of kind, in SGLang's order."""
        return [self.group_ranks(kind, i) for i in range(self.group_count(kind))]
