"""Every command option declared once, as a field of a frozen dataclass (default, help,
unit, range or choices in its metadata; :func:`~.base.option`), checked on construction
by the one validator (:func:`nbest_rescore.validation.check_options`), which also checks
the keys of the training and model configs, declared the same way. The jobs of
:mod:`nbest_rescore.api` derive from these classes and the CLI makes its click options
from them (:mod:`nbest_rescore.cli_options`). Imports neither torch nor click."""
from .base import Options, default_of, option
from .commands import (AUTO_RESUME, NBEST_FORMATS, REPLICATIONS, SEARCHES, TRAIN_DTYPES, AnalyzeOptions, ConvertOptions,
                       CurvesOptions, FinetuneOptions, InfoOptions, KaldiScoreOptions, MergeOptions, PplOptions, PrepareTextOptions, ReplicationsOption, ScoreOptions,
                       SearchOptions, SplitOptions, TableOptions, TrainOptions, TuneOptions)
from .parse import MAX_GRID_POINTS, check_grid, float_spec, parse_grid, parse_nn_weights, parse_number_list
from .score import (DTYPES, HISTORY_MODES, OUTPUTS, QUANTIZE, SCORING_MODES, SOFTMAX_IMPLS, SPAN_HYPS,
                    CONTEXT_TOKENS, HYP_ROOM, WEIGHT_SUM_TOL, CacheOptions, ContextFileOption, DecoderWeights,
                    DeviceOption, HfOptions, NbestOptions, PromptOption, ScorerOptions, ScoringOptions, ThreadsOption,
                    WeightOptions, check_weight_sum, nn_weights_example)

__all__ = sorted(n for n, v in globals().items() if not n.startswith("_") and not isinstance(v, type(base)))
