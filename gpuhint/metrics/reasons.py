"""Dead-letter reasons folded into a bounded set of classes (a label must not explode).

>>> reason_class("not JSON: Expecting value: line 1 column 1 (char 0)")
'not_json'
>>> reason_class("num_gpus: Input should be greater than or equal to 0 (1 error(s))")
'invalid_field'
>>> reason_class("processing error: KeyError: 'x'")
'processing_error'
"""

from __future__ import annotations

REASON_CLASSES = (
    "empty",
    "not_json",
    "schema_version",
    "wrong_kind",
    "wrong_key",
    "processing_error",
    "invalid_field",
)

_PREFIXES = (
    ("empty message", "empty"),
    ("not JSON", "not_json"),
    ("expected a JSON object", "not_json"),
    ("unsupported schema_version", "schema_version"),
    ("unknown kind", "wrong_kind"),
    ("expected kind", "wrong_kind"),
    ("unexpected kind", "wrong_kind"),
    ("key ", "wrong_key"),
    ("processing error", "processing_error"),
)


def reason_class(reason: str) -> str:
    """The class of a dead-letter reason; a field validation error is ``invalid_field``."""
    for prefix, cls in _PREFIXES:
        if reason.startswith(prefix):
            return cls
    return "invalid_field"
