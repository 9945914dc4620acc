"""Names of systems and models as shown to the user (no dependencies: usable from
every layer)."""
from __future__ import annotations

from typing import List, Sequence, Tuple


def unique_names(names: Sequence[str]) -> Tuple[str, ...]:
    """``names`` with repeats renamed ``NAME_2``, ``NAME_3``, ... (first kept)."""
    out: List[str] = []
    for n in names:
        k, new = 1, n
        while new in out:
            k += 1
            new = f"{n}_{k}"
        out.append(new)
    return tuple(out)
