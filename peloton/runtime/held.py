"""Offsets a stage still holds, so the runtime commits no further than the oldest one."""

from __future__ import annotations

from collections import Counter, deque


class HeldOffsets:
    """Messages a stage still holds, per partition, so the runtime commits no further than the
    oldest one. Offsets arrive in order per partition; release may come in any order."""

    def __init__(self):
        self._queues: dict[tuple[str, int], deque[int]] = {}
        # Counted, not a set: the records of one bundle share an offset, each held and released.
        self._released: dict[tuple[str, int], Counter[int]] = {}

    def hold(self, tp: tuple[str, int], offset: int) -> None:
        self._queues.setdefault(tp, deque()).append(offset)

    def release(self, tp: tuple[str, int], offset: int) -> None:
        if tp in self._queues:
            self._released.setdefault(tp, Counter())[offset] += 1

    def drop(self, tp: tuple[str, int]) -> None:
        self._queues.pop(tp, None)
        self._released.pop(tp, None)

    def lowest(self) -> dict[tuple[str, int], int]:
        out = {}
        for tp, q in self._queues.items():
            done = self._released.get(tp)
            while q and done and done[q[0]] > 0:
                offset = q.popleft()
                done[offset] -= 1
                if not done[offset]:
                    del done[offset]
            if q:
                out[tp] = q[0]
        return out
