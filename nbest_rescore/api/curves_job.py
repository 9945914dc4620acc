"""``nbest-rescore curves``: learning curves of training runs as one PNG
(docs/training.md "Learning curves")."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

from ..errors import DataError
from ..evaluation.plots import plot_learning_curves
from ..io.output_checks import check_output_file, check_outside_inputs
from ..options.commands import CurvesOptions
from ..os_errors import os_error_message


def read_curve(path) -> List[dict]:
    """The validation points of a run: the ``"curve"`` of a train JSON summary (what
    ``nbest-rescore train`` prints) or of a checkpoint's training facts (``.pt``).

    Raises:
        DataError: naming ``path``: unreadable, not JSON, no curve, or a point without
            ``words``, ``cpu_seconds`` or ``valid_ppl``.
    """
    if str(path).endswith(".pt"):
        from ..io.checkpoint import load_checkpoint

        curve = (load_checkpoint(path).get("info") or {}).get("curve")
    else:
        try:
            with open(path, encoding="utf-8") as f:
                curve = json.load(f).get("curve")
        except OSError as exc:
            raise DataError(f"cannot read {os_error_message(exc, path, writing=False)}") from None
        except (ValueError, AttributeError) as exc:
            raise DataError(f"{path}: not the JSON summary of nbest-rescore train ({exc}); give the file its "
                            f"stdout was written to, or the checkpoint (.pt)") from None
    if not curve:
        raise DataError(f"{path}: no learning curve (\"curve\"): train with validation text (data.valid); runs "
                        f"written before learning curves have none")
    for i, p in enumerate(curve):
        missing = [k for k in ("words", "cpu_seconds", "valid_ppl") if not isinstance(p, dict) or k not in p]
        if missing:
            raise DataError(f"{path}: curve point {i + 1} has no {', '.join(missing)}")
    return curve


@dataclass(frozen=True, kw_only=True)
class CurvesJob(CurvesOptions):
    """``nbest-rescore curves`` as a value (fields: :class:`~nbest_rescore.options.CurvesOptions`
    and ``runs``, the train JSON files or checkpoints). Raises DataError (a bad option,
    as many labels as runs missing, an unwritable ``out``)."""

    runs: Tuple[str, ...]

    def __post_init__(self):
        super().__post_init__()
        if self.label and len(self.label) != len(self.runs):
            raise DataError(f"--label: give one per run ({len(self.runs)}), got {len(self.label)}")
        check_outside_inputs(self.out, [("RUN", self.runs)])
        if not str(self.out).lower().endswith(".png"):
            raise DataError(f"--out {self.out}: the plot is a PNG; give a file name ending in .png")
        check_output_file(self.out, "--out")

    def run(self) -> str:
        """Read every run's curve (all before anything is written) and write the PNG;
        returns its path."""
        labels = self.label or tuple(Path(r).name.rsplit(".", 1)[0] for r in self.runs)
        runs = [(label, read_curve(r)) for label, r in zip(labels, self.runs)]
        parent = os.path.dirname(os.path.abspath(self.out))
        if not os.path.isdir(parent):
            raise DataError(f"--out {self.out}: the folder {parent} does not exist; create it first")
        return plot_learning_curves(runs, self.out, title=self.title)
