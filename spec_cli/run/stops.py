"""Stop strings: text that may be the start of one is held back until it
is known not to be (pure string work)."""

from __future__ import annotations

from typing import Sequence


class StopMatcher:
    """Holds back text that may be the start of a stop string."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._buf = ""
        self.matched: str | None = None  # the stop string found (Anthropic's `stop_sequence`)

    def feed(self, text: str) -> tuple[str, bool]:
        self._buf += text
        found = [(i, s) for s in self.stops for i in (self._buf.find(s),) if i >= 0]
        if found:  # the one that comes first in the text
            i, self.matched = min(found, key=lambda f: f[0])
            out, self._buf = self._buf[:i], ""
            return out, True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self._buf)), 0, -1):
                if self._buf.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        out = self._buf[:len(self._buf) - hold]
        self._buf = self._buf[len(self._buf) - hold:]
        return out, False

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return out
