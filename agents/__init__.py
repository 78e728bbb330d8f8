"""Model clients, the rollout loop (harness x environment x model -> Trajectory) and the Ray rollout pool."""

import os

# Before anything here imports litellm: use its bundled price map, never fetch one at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
