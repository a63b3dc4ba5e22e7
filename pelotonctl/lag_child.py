"""The lag monitor in a process of its own, for the long-lived processes that sample it (the lag
sampler of the API or the dashboard, `pelotonctl lag --watch` without an API).

The monitor's requests to the groups' coordinators (OffsetFetch, DescribeGroups) can abort the
process that makes them when a coordinator's connection drops as a request goes out
(librdkafka#4605 and #3663, rdkafka_queue.h `eonce->refcnt > 0`; a fix is open upstream): the
stages' membership question aborted admit and place so during a whole-cluster restart
(peloton/runtime/membership.py). Those are exactly the minutes an operator watches lag. Here an
abort ends only the child: that sample is answered "unavailable", the next starts another child
(whose status words start over, one sample deep).

    python -m pelotonctl.lag_child WINDOW TIMEOUT_S

reads one request per line on stdin ({"stages": [...] or null, "window": N or null}) and answers
each on stdout with {"sample": ...} (pelotonctl.lag's shape) or {"error": "..."}; it ends when
stdin closes (its parent went away)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time

from peloton.config import Settings

log = logging.getLogger("pelotonctl.lag")

# Spare time over the monitor's own: the child's start (imports, its first connection).
START_S = 15.0


class LagUnavailable(ConnectionError):
    """No sample this time: the broker did not answer, or the sampling process died."""


class LagInChild:
    """LagMonitor's sample() and close(), answered by a child process kept between samples."""

    def __init__(self, settings: Settings, window: int = 10, timeout_s: float = 5.0):
        self.settings = settings
        self.window = window
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._pending = b""  # what the child wrote past the last full line
        self._closed = False

    def sample(self, stages: tuple[str, ...] | None = None, window: int | None = None) -> dict:
        with self._lock:
            if self._closed:
                raise LagUnavailable("the lag sampler is closed")
            ask = json.dumps({"stages": list(stages) if stages else None, "window": window}) + "\n"
            # A sample asks every group, then the partitions, then their first unread messages:
            # each step waits timeout_s at most, and a dozen of them is the most a sample can take.
            limit = 12 * self.timeout_s + (START_S if self._child is None else 0)
            try:
                child = self._child or self._start()
            except OSError as exc:  # no process to be had (memory, limits)
                raise LagUnavailable(f"lag of the groups at {self.settings.bootstrap} is unavailable: {exc}") from None
            try:
                child.stdin.write(ask.encode())
                child.stdin.flush()
                line, why = self._answer(child, limit)
                answer = json.loads(line) if line is not None else None
            except BrokenPipeError:  # it ended before it read the question
                answer, why = None, self._ended(child)
            except (OSError, ValueError) as exc:  # a garbled answer
                answer, why = None, str(exc)
            if answer is None:
                self._drop()
                raise LagUnavailable(f"lag of the groups at {self.settings.bootstrap} is unavailable: {why}")
            if "error" in answer:
                raise LagUnavailable(f"broker at {self.settings.bootstrap} is unavailable: {answer['error']}")
            return answer["sample"]

    def close(self) -> None:
        """Ends the child; a sample under way ends with it (unavailable) rather than waiting out its
        limit, and no other starts."""
        self._closed = True
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        with self._lock:
            self._drop()

    # -- the child ---------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "pelotonctl.lag_child", str(self.window), str(self.timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **self.settings.env()})
        return self._child

    def _answer(self, child: subprocess.Popen, limit_s: float) -> tuple[bytes | None, str]:
        """The child's next line within limit_s; or None and why not (it ended, or no answer)."""
        fd, deadline = child.stdout.fileno(), time.monotonic() + limit_s
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, f"no answer in {limit_s:.0f}s"
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None, self._ended(child)
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line, ""

    @staticmethod
    def _ended(child: subprocess.Popen) -> str:
        """How the child that closed its pipes ended."""
        try:
            code = child.wait(5)
        except subprocess.TimeoutExpired:
            return "the sampling process closed its pipes"
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        log.warning("the lag sampling process ended (%s); the next sample starts another", how)
        return f"the sampling process ended ({how})"

    def _drop(self) -> None:
        """Ends the child (a throwaway: killed, not asked)."""
        child, self._child, self._pending = self._child, None, b""
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            with contextlib.suppress(OSError):
                pipe.close()


def main() -> None:
    window, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else writes to stdout goes to the log, not between the answers
    from peloton.runtime import error_text
    from pelotonctl.lag import STAGES, LagMonitor

    monitor = LagMonitor(Settings.from_env(), STAGES, window, timeout_s)
    try:
        for line in sys.stdin:  # until the parent closes it
            ask = json.loads(line)
            try:
                out = {"sample": monitor.sample(tuple(ask["stages"]) if ask.get("stages") else None, ask.get("window"))}
            except Exception as exc:  # the broker's error in its own words; the parent says unavailable
                out = {"error": error_text(exc)}
            answers.write(json.dumps(out) + "\n")
            answers.flush()
    except KeyboardInterrupt:  # Ctrl-C on `lag --watch` reaches the whole process group
        pass
    finally:
        monitor.close()


if __name__ == "__main__":
    main()
