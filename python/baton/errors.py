"""Exceptions raised by Baton's runtime, one per kind of refusal.

Every error from the native runtime carries the C++ Status message, which names the problem and the fix (the
option, the file, the field, the value). The classes also derive from the built-in exception a Python user
would catch for the same problem (ValueError for a bad option or request, FileNotFoundError for a missing
checkpoint file).
"""

from __future__ import annotations


class BatonError(RuntimeError):
    """Any error the runtime reports."""


class InvalidArgumentError(BatonError, ValueError):
    """An option, request or checkpoint Baton cannot serve; the message names it and what is supported."""


class NotFoundError(BatonError, FileNotFoundError):
    """A checkpoint file that does not exist."""


class ResourceExhaustedError(BatonError):
    """A full request table or work queue: the request was refused and nothing was lost; retry later."""


class DeviceError(BatonError):
    """The GPU failed (a device error word, a fault, a watchdog timeout); the message says which."""


class NoGPUError(BatonError):
    """No CUDA GPU is visible to this process."""


# absl::StatusCode values (absl/status/status.h).
_BY_CODE = {
    3: InvalidArgumentError,   # kInvalidArgument
    5: NotFoundError,          # kNotFound
    11: InvalidArgumentError,  # kOutOfRange
    8: ResourceExhaustedError,  # kResourceExhausted
    4: DeviceError,            # kDeadlineExceeded (the watchdog)
    13: DeviceError,           # kInternal (a fault that poisoned the context)
    9: BatonError,             # kFailedPrecondition
}


def install(native) -> None:
    """Tells the native module which class to raise for each status code."""
    native._set_error_types(dict(_BY_CODE))
