"""The Ray rollout pool: `driver` (RolloutPool, on the caller's side: placement, retries, streaming) and `actor`
(one RolloutActor per worker process, running episodes with `agents.rollout`)."""
