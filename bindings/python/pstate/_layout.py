"""Layout: SGLang's (or vLLM's) rank layout for a world, computed locally (no communication).

Wraps pstate_layout_*; also builds the pstate_parallel_config_t that initialize_model_parallel
takes, from keyword arguments named like the C fields (and SGLang's initialize_model_parallel):
engine="vllm" with data_parallel_size, prefill_context_parallel_size, decode_context_parallel_size
and moe_model=True gives vLLM's layout.
"""
from __future__ import annotations

from typing import List, Optional, Union

from . import capi
from ._enums import Engine, GroupKind, coerce
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
    "engine",
    "data_parallel_size",
    "prefill_context_parallel_size",
    "moe_model",
)


def make_config(**sizes: Optional[int]) -> "capi.pstate_parallel_config_t":
    """A pstate_parallel_config_t holding the sizes given and 0 for every other one: pstate.h's
    rule for every front end is that a size of 0 is its default (tensor_parallel_size: world_size
    / pipeline_parallel_size; the others 1; shared_experts_tensor_parallel_size: no group), so a
    size not given (or None) means what the C library, `pstate layout` and the Go and Rust
    bindings mean by it. engine is an Engine, its name ("sglang", "vllm") or number (not given:
    SGLang); moe_model a bool (or 0/1)."""
    cfg = capi.pstate_parallel_config_t()
    for key in CONFIG_FIELDS:
        setattr(cfg, key, 0)
    for key, value in sizes.items():
        if key not in CONFIG_FIELDS:
            raise InvalidArgumentError(f"unknown parallel size {key!r}; expected one of {', '.join(CONFIG_FIELDS)}")
        if value is None:
            continue
        if key == "engine":
            setattr(cfg, key, int(coerce(Engine, value, "engine")))
            continue
        if key == "moe_model" and isinstance(value, bool):
            setattr(cfg, key, int(value))
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"{key} must be an int, got {type(value).__name__}")
        setattr(cfg, key, value)
    return cfg


class Layout:
    """The groups SGLang's initialize_model_parallel builds for world_size ranks (vLLM's with
    engine="vllm").

    >>> lay = Layout(8, tensor_parallel_size=4, pipeline_parallel_size=2)
    >>> lay.groups(GroupKind.PP)
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    >>> Layout(8, engine="vllm", tensor_parallel_size=2, pipeline_parallel_size=2, data_parallel_size=2,
    ...        moe_model=True).groups(GroupKind.EP)
    [[0, 1, 4, 5], [2, 3, 6, 7]]

    A size not given, None or 0 is its default (pstate.h, the same rule as the C library and
    `pstate layout`): tensor_parallel_size is world_size / pipeline_parallel_size, the others 1.
    Invalid sizes raise InvalidArgumentError with the library's explanation.
    """

    def __init__(self, world_size: int, **sizes: Optional[int]) -> None:
        self._handle = None
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise InvalidArgumentError(f"world_size must be an int, got {type(world_size).__name__}")
        self.world_size = world_size
        self._handle = capi.layout_create(self.world_size, make_config(**sizes))

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

    def group_count(self, kind: Union[GroupKind, str]) -> int:
        """Number of groups of kind (a GroupKind or its name; 0 for kinds this layout does not have)."""
        return capi.layout_group_count(self._live(), int(coerce(GroupKind, kind, "group kind")))

    def group_ranks(self, kind: Union[GroupKind, str], index: int) -> List[int]:
        """Global ranks of group index of kind, ascending."""
        return capi.layout_group_ranks(self._live(), int(coerce(GroupKind, kind, "group kind")), index,
                                       self.world_size)

    def group_of(self, kind: Union[GroupKind, str], rank: int) -> int:
        """Index of the group of kind that contains global rank."""
        return capi.layout_group_of(self._live(), int(coerce(GroupKind, kind, "group kind")), rank)

    def groups(self, kind: Union[GroupKind, str]) -> List[List[int]]:
        """Every group of kind, in its engine's order."""
        return [self.group_ranks(kind, i) for i in range(self.group_count(kind))]
