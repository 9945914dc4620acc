"""nbest-rescore: rescore Kaldi-style N-best lists with corpus-level neural LMs.

Conventions used throughout the package:

* natural logarithms everywhere unless a name says otherwise (``log10``);
* a *cost* is a negated natural-log score (Kaldi convention, larger = worse);
* a *score* is a natural-log (log-likelihood) value (larger = better);
* tensors are batch-first: ``[B, T]`` token ids, ``[B, T, V]`` outputs.
"""

__version__ = "0.1.0"
