"""Component ids of the page's core views, declared once (by these strings the browser tests
find them).  A view may declare its own ids in its module instead, as Budget, What fits and
Measured memory do."""

from __future__ import annotations

__all__: list[str] = []  # every constant below is public by convention; listed for linters

# ---- app-level stores (small: keys and view state only)
GRAPH_KEY = "graph-key"  # {"key": content hash, "name": str}
PLAN_KEY = "plan-key"  # {"key": plan cache key} or None
BASE_KEY = "base-key"  # {"key": baseline-plan cache key} or None
VIEW_RANGE = "view-range"  # {"x0": int, "x1": int} or None (whole step axis)
SELECTION = "selection"  # {"kind": "op"|"tensor", "id": str} or None
STEP = "step"  # {"step": int} or None (then: the planned peak step)
TRACE_RESULT = "trace-result"  # last zoo trace {"key": graph key}
PLAN_RESULT = "plan-result"  # last background plan {"key": plan key, "graph": graph key}
IMPORT_RESULT = "import-result"  # last imported plan {"key": plan key, "graph": graph key}
RUNNING = "running"  # {"plan": bool, "trace": bool, "verify": bool}: jobs running in this page
SESSION = "session"  # a random id per page load (names this page's cancel requests)
VERIFY_OFF = "verify-off"  # True when no device may verify this plan
CALLBACK_ERROR = "callback-error"  # the banner every failed callback writes its message to

# ---- loading
SAMPLE_PICK = "sample-pick"
UPLOAD = "graph-upload"
LOAD_STATUS = "load-status"
ZOO_MODEL = "zoo-model"
ZOO_BATCH = "zoo-batch"
ZOO_SEQ = "zoo-seq"
ZOO_OPTIMIZER = "zoo-optimizer"
ZOO_SETTING = "zoo-setting"
ZOO_TRACE_BTN = "zoo-trace-btn"
ZOO_CANCEL_BTN = "zoo-cancel-btn"
ZOO_STATUS = "zoo-status"
ZOO_PROGRESS = "zoo-progress"  # "tracing gpt2-xl… 12 s" while the trace job runs
ZOO_PRECISION = "zoo-precision"  # fp32 | bf16-mixed | bf16 | fp16-mixed
ZOO_ATTENTION = "zoo-attention"  # sdpa | math | flash | efficient
ZOO_MERGE_CASTS = "zoo-merge-casts"  # checklist: ["merge"] merges autocast's repeated casts
HF_UPLOAD = "hf-config-upload"  # a dropped Hugging Face config.json
HF_TASK = "hf-task"
HF_CONFIG = "hf-config"  # store: the dropped config (a dict) or None
HF_STATUS = "hf-status"

# ---- planning
METHOD = "plan-method"
BASELINE = "plan-baseline"
TIME_LIMIT = "plan-time-limit"
NODE_LIMIT = "plan-node-limit"
WORKERS = "plan-workers"
ALIGNMENT = "plan-alignment"
PLAN_BTN = "plan-btn"
CANCEL_BTN = "cancel-btn"
PROGRESS = "plan-progress"
PROGRESS_TEXT = "plan-progress-text"
PLAN_STATUS = "plan-status"
SETTINGS_MSG = "plan-settings-msg"  # what is wrong with the settings, in words
#: The plan-settings form, in the order of ``settings_from_form``'s arguments.
PLAN_FORM = (METHOD, TIME_LIMIT, NODE_LIMIT, WORKERS, ALIGNMENT)

# ---- views
SUMMARY = "summary-card"
CURVES = "curves-graph"
TREE = "task-tree"
TREE_NODE = "tree-node"  # pattern-matching type: {"type": TREE_NODE, "index": node_id}
TREE_MORE = "tree-more"  # pattern-matching type: "+ N more sub-tasks" of node_id
TREE_OPEN = "tree-open"  # store: {node_id: children mounted} (the lazy tree's expansions)
TIMELINE = "timeline-graph"
LAYOUT = "layout-graph"
BASE_LAYOUT = "base-layout-graph"
LAYOUT_INFO = "layout-info"
LIVE_TABLE = "live-table"
LIVE_TITLE = "live-title"
SEARCH_INPUT = "search-input"
SEARCH_RESULTS = "search-results"
SEARCH_HIT = "search-hit"  # pattern-matching type: {"type": SEARCH_HIT, "index": "op:x"}
SEARCH_PICK = "search-pick"  # store: {"index": "op:x", "n": k}, the hit picked (search_hits.js)
RESET_ZOOM = "reset-zoom"
RANGE_TEXT = "range-text"
EXPLAIN = "explain-panel"
TOUR = "walkthrough"  # the guided walkthrough card
TOUR_HIT = "tour-hit"  # pattern-matching: {"type": TOUR_HIT, "index": "tensor:x", "step": i}
MODULE_TABLE = "module-table"  # per-module memory at the peak (sortable; click selects)
MODULE_ICICLE = "module-icicle"
MODULE_DEPTH = "module-depth"  # group module paths by this many components, or "full"
MODULE_SIDE = "module-side"  # "after" (the plan) or "before" (the baseline) kinds
MODULE_TITLE = "module-title"
MODULE_CARD = "module-card"
MODULE_SEEN = "module-seen"  # store: True once the module card was scrolled into view

# ---- export / import
EXPORT_JSON = "export-json-btn"
EXPORT_CSV = "export-csv-btn"
EXPORT_HTML = "export-html-btn"
EXPORT_PNG = "export-png-btn"
PNG_FIGURE = "png-figure-pick"
DOWNLOAD = "download"
EXPORT_STATUS = "export-status"
PLAN_UPLOAD = "plan-upload"
IMPORT_STATUS = "import-status"

# ---- slot for the executor helper ("Verify on GPU/CPU"); layout leaves an empty card
VERIFY_CARD = "verify-card"
VERIFY_BTN = "verify-btn"
VERIFY_DEVICE = "verify-device"
VERIFY_STATUS = "verify-status"
VERIFY_RESULT = "verify-result"
VERIFY_NOTE = "verify-note"  # why a device is off
VERIFY_CANCEL_BTN = "verify-cancel-btn"
VERIFY_DONE = "verify-done"  # store: last finished verification {"key", "device", ...}

__all__ = [n for n in dir() if n.isupper()]
