"""Exceptions raised by the sagejit package.

Every error is a :class:`SageJitError` (a ``RuntimeError``).  Errors about
the arguments are also ``ValueError``s, so ``except ValueError`` works as it
does for other PyTorch functions; out-of-memory is also a ``MemoryError``.
Each carries the library's status (``status``, ``status_name``) and the
detail text of ``sj_context_last_error`` (``detail``).
"""

from typing import Optional, Sequence, Tuple

from . import _structs as S

__all__ = [
    "SageJitError",
    "LibraryNotFoundError",
    "LibraryVersionError",
    "InvalidArgumentError",
    "UnsupportedError",
    "OutOfMemoryError",
    "error_for_status",
]


class SageJitError(RuntimeError):
    """Base class of every sagejit error.

    Attributes:
        status: the ``sj_status`` value, or ``None`` when the error did not
            come from the library (e.g. the library was not found).
        status_name: the enumerator's name, e.g. ``"SJ_ERR_UNSUPPORTED"``.
        detail: the library's detail text (``sj_context_last_error``) or the
            package's own explanation.
        function: the C function (or Python function) that failed.
    """

    def __init__(
        self,
        message: str,
        status: Optional[int] = None,
        status_name: Optional[str] = None,
        detail: str = "",
        function: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = status_name
        self.detail = detail
        self.function = function


class LibraryNotFoundError(SageJitError):
    """``libsagejit.so`` could not be found or loaded.

    ``tried`` lists ``(candidate, reason)`` pairs in the order they were
    tried.
    """

    def __init__(self, message: str,
                 tried: Sequence[Tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.tried = list(tried)


class LibraryVersionError(SageJitError):
    """The loaded library's major.minor differs from the package's."""


class InvalidArgumentError(SageJitError, ValueError):
    """An argument is invalid (``SJ_ERR_INVALID_ARGUMENT``)."""


class UnsupportedError(InvalidArgumentError):
    """Valid, but not supported by this build or device
    (``SJ_ERR_UNSUPPORTED``), e.g. an unsupported head dimension."""


class OutOfMemoryError(SageJitError, MemoryError):
    """Out of (device or host) memory (``SJ_ERR_OUT_OF_MEMORY``)."""


_CLASS_FOR_STATUS = {
    S.SJ_ERR_INVALID_ARGUMENT: InvalidArgumentError,
    S.SJ_ERR_UNSUPPORTED: UnsupportedError,
    S.SJ_ERR_OUT_OF_MEMORY: OutOfMemoryError,
}


def error_for_status(
    status: int,
    function: str,
    detail: str,
    status_name: Optional[str] = None,
    status_text: Optional[str] = None,
) -> SageJitError:
    """Builds the exception for a failed call.

    The message reads ``"<function> failed: <NAME> (<text>): <detail>"``.
    """
    name = status_name or S.STATUS_NAMES.get(status, "SJ_STATUS_%d" % status)
    head = "%s failed: %s" % (function, name)
    if status_text:
        head += " (%s)" % status_text
    message = "%s: %s" % (head, detail) if detail else head
    cls = _CLASS_FOR_STATUS.get(status, SageJitError)
    return cls(message, status=status, status_name=name, detail=detail,
               function=function)


def invalid_argument(detail: str, function: str) -> InvalidArgumentError:
    """An argument error found by the Python layer, worded like the
    library's (status ``SJ_ERR_INVALID_ARGUMENT``)."""
    err = error_for_status(S.SJ_ERR_INVALID_ARGUMENT, function, detail,
                           status_text="invalid argument")
    assert isinstance(err, InvalidArgumentError)
    return err
