"""A simulated clock: bench runs the real models for the tokens and the
acceptance, but the cost model sees, and the report charges, the verify
cost c(n) and the draft's cost from a profile -- so the policy can be run
on a GPU's clock on a machine that has none.  Every figure it yields is
labelled simulated.

Profiles are small TOML files (spec_cli/data/clocks/, or a path):

    c1_ms        one target token (a batch of one row)
    slope        each further row up to `knee` rows costs this share of c1
    knee
    slope_after  each row past the knee, as a share of c1 (up to 17 rows)
    prefill_ms_per_token   rows past 17 (reading a prompt)
    draft_ratio  the draft model's cost per row, as a share of the target's
                 (the same shape)

or `measured = true`: the curves remembered for this machine, for the
target and the draft.

What is charged: a step costs c(rows) to verify, plus for a draft model
the batch that catches it up and one row per further drafted token
(draft_ratio x c); reading the prompt costs c(prompt tokens).  On top of
that the round charges the host's time it measured (run/round.py: all
but the time inside llama.cpp's decode calls -- the rule, sampling, the
lookup, Python), so a simulated device never gets a free host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError

CLOCKS = Path(__file__).resolve().parent.parent / "data" / "clocks"
ROWS = 17  # a parametric profile's table (16 drafted + 1); a measured one goes as far as its probe


@dataclass(frozen=True)
class Clock:
    name: str
    verify_ms: tuple[float, ...]       # c(1..n): ROWS, or as far as a measured curve goes
    row_ms: float                      # each row past the table
    draft_ms: tuple[float, ...]        # the draft model's c_d(1..n)
    draft_row_ms: float
    here: bool = False  # this machine's probed curves (`measured`): its verdicts on the draft model stand

    @staticmethod
    def _c(table: tuple[float, ...], row: float, n: int) -> float:
        if n <= 0:
            return 0.0
        if n <= len(table):
            return table[n - 1] / 1e3
        return (table[-1] + row * (n - len(table))) / 1e3

    def verify_s(self, rows: int) -> float:
        return self._c(self.verify_ms, self.row_ms, rows)

    def prefill_s(self, tokens: int) -> float:
        return self.verify_s(tokens)

    def draft_s(self, drafted: int, read: int) -> float:
        """A draft model that read `read` tokens in one batch (its catch-up,
        which yields the first draft token) and decoded the rest one by one."""
        if drafted <= 0 and read <= 0:
            return 0.0
        return (self._c(self.draft_ms, self.draft_row_ms, max(read, 1))
                + max(drafted - 1, 0) * self._c(self.draft_ms, self.draft_row_ms, 1))

    def draft_batch_s(self, lengths: list[int]) -> float:
        """Several sequences' drafts of these lengths, drafted together: a
        draft batch a position, of as many rows as drafts reach it."""
        return sum(self._c(self.draft_ms, self.draft_row_ms, sum(n > j for n in lengths))
                   for j in range(max(lengths, default=0)))

    def catch_up_s(self, tokens: int) -> float:
        """What reading `tokens` more costs the draft beyond its usual step."""
        return 0.0 if tokens <= 2 else self._c(self.draft_ms, self.draft_row_ms, tokens)

    @property
    def draft_per_token_s(self) -> float:
        return self.draft_ms[0] / 1e3

    def timings(self) -> dict[int, float]:
        """c(n) for the cost model's prior."""
        return {n: self.verify_s(n) for n in range(1, len(self.verify_ms) + 1)}

    @classmethod
    def parametric(cls, name: str, *, c1_ms: float, slope: float, knee: int, slope_after: float,
                   prefill_ms_per_token: float, draft_ratio: float) -> "Clock":
        table = tuple(c1_ms * (1 + slope * (min(n, knee) - 1) + slope_after * max(n - knee, 0))
                      for n in range(1, ROWS + 1))
        return cls(name, table, prefill_ms_per_token, tuple(draft_ratio * t for t in table),
                   draft_ratio * prefill_ms_per_token)

    @classmethod
    def from_curves(cls, name: str, target: dict[int, float], draft: dict[int, float] | None) -> "Clock":
        """From probed curves {rows: seconds} (linear between the sizes
        probed, as far as the widest; past it, the widest's cost per row)."""
        from ..core.cost import CostModel

        def table(curve):
            ms = tuple(s * 1e3 for s in CostModel.from_timings(curve, max(ROWS, *curve)).prior)
            return ms, ms[-1] / len(ms)
        t, t_row = table(target)
        d, d_row = table(draft) if draft else (tuple(0.0 for _ in t), 0.0)
        return cls(name, t, t_row, d, d_row, here=True)


def shipped() -> list[str]:
    return sorted(p.stem for p in CLOCKS.glob("*.toml"))


def read_profile(spec: str) -> tuple[str, dict | None]:
    """A shipped profile's name, or a TOML path: its name and its checked
    costs, None for a measured profile (checked before any model loads)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    path = Path(spec)
    if not path.suffix == ".toml":
        path = CLOCKS / f"{spec}.toml"
        if not path.is_file():
            raise SpecError(f"no clock profile {spec!r}",
                            hint=f"Shipped: {', '.join(shipped())}; or give a .toml file.")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecError(f"cannot read clock profile {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"clock profile {path} is not valid TOML: {e}") from e
    name = str(data.get("name", path.stem))
    if data.get("measured"):
        return name, None
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise SpecError(f"clock profile {path} lacks {', '.join(missing)}",
                        hint="See spec_cli/data/clocks/gpu-70b.toml for the fields.")
    try:
        values = {k: float(data[k]) for k in KEYS}
    except (TypeError, ValueError):
        raise SpecError(f"clock profile {path}: {', '.join(KEYS)} must be numbers") from None
    if values["c1_ms"] <= 0 or min(values.values()) < 0 or values["knee"] < 1:
        raise SpecError(f"clock profile {path}: costs must be positive and knee at least 1")
    values["knee"] = int(values["knee"])
    return name, values


KEYS = ("c1_ms", "slope", "knee", "slope_after", "prefill_ms_per_token", "draft_ratio")


def load_clock(spec: str, pair=None) -> Clock:
    """The clock a profile describes; `measured` reads the pair's probed curves."""
    name, values = read_profile(spec)
    if values is not None:
        return Clock.parametric(name, **values)
    if pair is None:
        raise SpecError("the measured clock needs the loaded models")
    from ..llama.probe import ensure
    return Clock.from_curves(name, ensure(pair.target), ensure(pair.draft) if pair.draft else None)
