"""Activation offload with prefetch (`parallelism.activation_offload`), as SageMaker's model-parallel
library v2 does it: the tensors each decoder block saves for its backward go to host memory after its
forward, and come back a few blocks ahead of the backward that needs them, so the GPU does not wait.

PyTorch's `save_on_cpu` copies every saved tensor back only when the backward asks for it, on the compute
stream. Here the copies run on a side stream into pinned memory both ways: while block i runs its backward,
blocks i-1 ... i-horizon are already coming back. Under full activation checkpointing a block saves only its
input (the checkpoint's), so that is what moves. Parameters stay where they are (FSDP frees and gathers its
own). On a CPU the "host copy" is a copy in the same memory and the copies are synchronous: the bookkeeping,
and the losses, are those of a GPU run.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class _Block:
    """One block's saved tensors: their host copies, then, once fetched, their device copies."""

    host: list[torch.Tensor | None] = field(default_factory=list)
    device: list[torch.Tensor | None] | None = None
    stored: torch.cuda.Event | None = None
    fetched: torch.cuda.Event | None = None


class ActivationOffload:
    def __init__(self, device: torch.device, horizon: int) -> None:
        self.device = device
        self.horizon = horizon
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.blocks: dict[int, _Block] = {}

    @contextmanager
    def saving(self, index: int) -> Iterator[None]:
        """Offload what block `index` saves while this context runs its forward."""
        block = self.blocks[index] = _Block()  # a new micro batch's forward: what was not read is dropped

        def pack(tensor: torch.Tensor):
            if isinstance(tensor, nn.Parameter) or tensor.device != self.device:
                return tensor
            block.host.append(self._to_host(tensor))
            return index, len(block.host) - 1

        with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):
            yield
        if self.stream is not None:
            block.stored = self.stream.record_event()

    def prefetch_from(self, output: torch.Tensor, index: int) -> torch.Tensor:
        """`output` of block `index`; when the backward reaches it, blocks index-horizon..index come back."""
        if output.requires_grad:
            output.register_hook(lambda _grad: self._fetch_range(index))
        return output

    def _fetch_range(self, index: int) -> None:
        for earlier in range(index, max(index - self.horizon, 0) - 1, -1):
            self._fetch(earlier)

    def _to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.stream is None:
            return tensor.detach().clone()
        host = torch.empty(tensor.shape, dtype=tensor.dtype, layout=tensor.layout, pin_memory=True)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            host.copy_(tensor, non_blocking=True)
        tensor.record_stream(self.stream)  # its memory is not reused before the copy has read it
        return host

    def _fetch(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None or block.device is not None:
            return
        if self.stream is None:
            block.device = block.host
        else:
            with torch.cuda.stream(self.stream):
                self.stream.wait_event(block.stored)
                block.device = [host.to(self.device, non_blocking=True) for host in block.host]
            block.fetched = self.stream.record_event()
        block.host = []

    def _unpack(self, saved) -> torch.Tensor:
        if isinstance(saved, torch.Tensor):
            return saved
        index, slot = saved
        self._fetch(index)  # not prefetched: the last block's first read, or a horizon of 0
        block = self.blocks[index]
        tensor = block.device[slot]
        if tensor is None:
            raise RuntimeError("activation offload reads each saved tensor once (a backward with retain_graph?)")
        block.device[slot] = None
        if block.fetched is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(block.fetched)
            tensor.record_stream(current)  # made on the side stream, used and freed on this one
        if all(t is None for t in block.device):
            del self.blocks[index]
        return tensor
