"""Readers and writers for N-best lists, scores, texts and checkpoints (no model code).

Units: natural logarithms; a *cost* is a negated natural-log value (larger = worse).
Bad input raises :class:`nbest_rescore.errors.DataError` naming the file and line.
"""
from .atomic import atomic_dir, atomic_path, atomic_write
from .output_checks import check_output_dir
from .checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from .jsonl_nbest import iter_jsonl_nbest, read_jsonl_nbest, write_jsonl_nbest
from .kaldi_nbest import iter_kaldi_nbest, read_kaldi_nbest_dir, read_utt_map, split_hyp_key, write_kaldi_nbest_files
from .kaldi_text import read_kaldi_text, write_kaldi_text
from .lm_text import read_lm_text
from .plain_nbest import find_plain_score_files, iter_plain_nbest, read_plain_nbest, write_plain_nbest_files
from .references import read_references
from .score_ark import read_cost_ark, write_cost_ark

__all__ = [
    "CHECKPOINT_FORMAT", "atomic_dir", "atomic_path", "atomic_write", "check_output_dir", "find_plain_score_files",
    "iter_jsonl_nbest", "iter_kaldi_nbest", "iter_plain_nbest", "load_checkpoint", "read_cost_ark",
    "read_jsonl_nbest", "read_kaldi_nbest_dir", "read_kaldi_text", "read_lm_text", "read_plain_nbest",
    "read_references", "read_utt_map", "save_checkpoint", "split_hyp_key", "write_cost_ark", "write_jsonl_nbest",
    "write_kaldi_nbest_files", "write_kaldi_text", "write_plain_nbest_files",
]
