"""The converter's error: a `ModelLoadError`, so the edges report it like any model that cannot load."""

from __future__ import annotations

from whosaid.errors import ModelLoadError


class ConversionError(ModelLoadError):
    """A CTranslate2 checkpoint could not be converted: missing files or parts, a truncated or
    foreign model.bin, or a layout this converter does not know. The message says which file and
    what to do."""

    code = "conversion_error"
