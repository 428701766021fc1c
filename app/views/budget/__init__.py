"""The Budget view: peak memory against extra compute, roam's budget plans and the
checkpointing recipes; a point loads its plan into every view."""
