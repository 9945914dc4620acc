"""Rescoring: score combination, 1-best history conditioning, batching."""
