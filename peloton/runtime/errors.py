"""What can go wrong while a stage handles a batch, and which failures are the record's fault
(dead-lettered) rather than the broker's or the store's (the batch is tried again)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from peloton.runtime.transaction import TransactionError
from peloton.store import store_unavailable


class BrokerUnavailable(RuntimeError):
    """The broker did not answer in time (a command line says so in one line, exit 5)."""


class DeliveryError(RuntimeError):
    """Produced messages did not reach the broker (yet): the broker is away or refused them."""


class RecordError(ValueError):
    """The record being handled cannot be used; it goes to the dead-letter topic with this reason."""


class RecordTooLarge(RecordError):
    """What a record would make is larger than the broker accepts."""


def error_text(exc: BaseException) -> str:
    """A failure in the broker's own words: a KafkaException's KafkaError text (not its repr),
    else the exception's message, else its type's name."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return error.str()
    return str(exc) or type(exc).__name__


def is_transient(exc: BaseException) -> bool:
    """A failure that is not the record's fault: the broker or the store is unavailable. The
    batch is tried again after a pause instead of being dead-lettered."""
    if isinstance(exc, (DeliveryError, TransactionError, *store_unavailable())):
        return True
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        return code not in _RECORD_KAFKA_ERRORS
    return False


_RECORD_KAFKA_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError._INVALID_ARG,
                        KafkaError._MSG_TIMED_OUT}
