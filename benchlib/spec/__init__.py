"""What to run: run settings, knobs, variants, the tune search space and study files. Nothing here imports torch.

The bottom of the stack above the results store: every other layer reads its vocabulary and its
configurations from here.
"""
from .knobs import Knobs
from .settings import (
                       KNOB_NAMES,
                       SETTING_RULES,
                       RunConfig,
                       RunSettings,
                       check_batch_sizes,
                       setting_defaults,
                       setting_names,
                       settings_from_mapping,
)
from .study import StudyConfig, expand_configs, expand_variants, parse_study, study_from_file
from .tune import OBJECTIVES, SearchSpace, TuneSpec, parse_search_space
from .variants import PRESETS, Variant, apply_variant, parse_variant, variant_spec
from .vocab import DATASETS, MODELS

__all__ = [
    "DATASETS", "KNOB_NAMES", "Knobs", "MODELS", "OBJECTIVES", "PRESETS", "RunConfig", "RunSettings", "SETTING_RULES",
    "SearchSpace", "StudyConfig", "TuneSpec", "Variant", "apply_variant", "check_batch_sizes", "expand_configs",
    "expand_variants", "parse_search_space", "parse_study", "parse_variant", "study_from_file", "setting_defaults",
    "setting_names", "settings_from_mapping", "variant_spec",
]
