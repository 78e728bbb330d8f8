"""Model clients, the rollout loop (harness x environment x model -> Trajectory) and the Ray rollout pool."""
