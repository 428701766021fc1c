"""Model zoo: the ROAM paper's models plus small teaching models, in plain torch.

* :mod:`~roam_core.zoo.registry`: :data:`ZOO` maps a model name (exactly as the CLI accepts
  it) to a :class:`ModelSpec`; :func:`build_model`;
* :mod:`~roam_core.zoo.steps`: :func:`build_zoo_step` (model, batch, loss and optimizer of
  one configuration and setting) and :func:`trace_zoo`;
* :mod:`~roam_core.zoo.cnn`, :mod:`~roam_core.zoo.transformer`, :mod:`~roam_core.zoo.teach`:
  the models; :mod:`~roam_core.zoo.hf`: Hugging Face configs traced without weights;
  :mod:`~roam_core.zoo.min_cut`: torch's min-cut baseline on zoo configurations.

This package imports torch; ``import roam_core`` does not import it.
"""

from roam_core.zoo.registry import (
    ROAM_CONFIGS,
    ROBERTA_HELLO_WORLD,
    ZOO,
    ModelSpec,
    build_model,
    parameter_count,
    resolved_attention,
    resolved_seq_len,
)
from roam_core.zoo.steps import ZooStep, build_zoo_step, trace_zoo, zoo_origin

__all__ = [
    "ROAM_CONFIGS",
    "ROBERTA_HELLO_WORLD",
    "ZOO",
    "ModelSpec",
    "ZooStep",
    "build_model",
    "build_zoo_step",
    "parameter_count",
    "resolved_attention",
    "resolved_seq_len",
    "trace_zoo",
    "zoo_origin",
]
