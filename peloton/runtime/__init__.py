"""The one Kafka runtime every stage runs on.

A stage is a `Stage` (pure-ish handler code, stage.py) run by `StageRuntime` (loop.py), which owns
the Kafka plumbing:

    poll a batch -> decode (bad bytes go to the dead-letter topic) -> stage.handle(batch)
    -> stage.tick(now) -> flush what was produced -> commit offsets

Offsets are committed only after everything produced for the batch is flushed (at-least-once),
and never past a message the stage still holds (`Stage.held_offsets`, held.py): a gang waiting
for room or for a host is redelivered to whichever instance owns its partition after a crash.
SIGTERM finishes the batch, commits and leaves the group.

One idea per module: record.py (what a stage reads), emitter.py (what it produces, in bundles),
errors.py (whose fault a failure is), stage.py (the contract and batch handling), loop.py (the
loop, commits and rebalances), transaction.py (output and offsets committed together), views.py
(compacted topics read as tables), readback.py (reading a partition back), clients.py (the
clients' settings), sweep.py (a chore done a batch a tick), stuck.py (a watchdog on a loop's
turns). The names a stage needs are importable from the package itself.
"""

from peloton.runtime.clients import CONSUMER_RECOVERY, QUIET, RECOVERY, kafka_access, producer_config
from peloton.runtime.emitter import BUNDLE_MAX_ITEMS, Emitter, RecordingEmitter
from peloton.runtime.errors import (
    BrokerUnavailable,
    DeliveryError,
    RecordError,
    RecordTooLarge,
    error_text,
    is_transient,
)
from peloton.runtime.held import HeldOffsets
from peloton.runtime.loop import StageRuntime
from peloton.runtime.record import Record, WrongSchema, decode_message, now_ms
from peloton.runtime.stage import Stage, handle_batch
from peloton.runtime.sweep import Sweep
from peloton.runtime.views import CompactedView, StaticView

__all__ = [
    "BUNDLE_MAX_ITEMS", "CONSUMER_RECOVERY", "QUIET", "RECOVERY", "BrokerUnavailable", "CompactedView",
    "DeliveryError", "Emitter", "HeldOffsets", "Record", "RecordError", "RecordTooLarge", "RecordingEmitter",
    "Stage", "StageRuntime", "StaticView", "Sweep", "WrongSchema", "decode_message", "error_text", "handle_batch",
    "is_transient", "kafka_access", "now_ms", "producer_config",
]
