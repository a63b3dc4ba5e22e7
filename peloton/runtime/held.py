"""Offsets a stage still holds, so the runtime commits no further than the oldest one."""

from __future__ import annotations

from collections import deque


class HeldOffsets:
    """Messages a stage still holds, per partition, so the runtime commits no further than the
    oldest one. Offsets arrive in order per partition; release may come in any order."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], deque[int]] = {}
        # Counted, not a set: the records of one bundle share an offset, each held and released.
        self._released: dict[tuple[str, int], dict[int, int]] = {}

    # Called per gang: no deque or counter is made for a partition that has one (setdefault's
    # default is built at every call, and a Counter is dear in placement's hot path).
    def hold(self, tp: tuple[str, int], offset: int) -> None:
        q = self._queues.get(tp)
        if q is None:
            q = self._queues[tp] = deque()
        q.append(offset)

    def release(self, tp: tuple[str, int], offset: int) -> None:
        if tp in self._queues:
            done = self._released.get(tp)
            if done is None:
                done = self._released[tp] = {}
            done[offset] = done.get(offset, 0) + 1

    def drop(self, tp: tuple[str, int]) -> None:
        self._queues.pop(tp, None)
        self._released.pop(tp, None)

    def lowest(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for tp, q in self._queues.items():
            done = self._released.get(tp)
            while q and done and done.get(q[0], 0) > 0:
                offset = q.popleft()
                done[offset] -= 1
                if not done[offset]:
                    del done[offset]
            if q:
                out[tp] = q[0]
        return out
