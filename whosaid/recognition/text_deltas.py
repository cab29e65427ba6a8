"""Text of a transcript piece by piece, a piece per window as its batch finishes (streamed
responses, CLI progress).

The pieces join into exactly the finished transcript's `text`: that text is the chunks' texts
joined and stripped, so the first piece loses its leading whitespace and each piece's trailing
whitespace is held back until more text follows (the last piece's is never sent).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from whosaid.recognition.segments import Span


class TextDeltas:
    """Feeds `emit` the new text of each window; empty pieces are never emitted."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._started = False
        self._held_whitespace = ""

    def add(self, texts: Iterable[str]) -> None:
        # Whitespace-only pieces are dropped, as the recognizer drops empty chunks.
        text = "".join(piece for piece in texts if piece.strip())
        if not text:
            return
        if not self._started:
            text = text.lstrip()
            self._started = True
        body = text.rstrip()
        delta = self._held_whitespace + body
        self._held_whitespace = text[len(body) :]
        self._emit(delta)

    def add_window(self, spans: Sequence[Span]) -> None:
        """A window's spans, as Recognizer.transcribe's `on_window` gives them."""
        self.add(span.text for span in spans)
