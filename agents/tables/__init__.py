"""Trajectories on disk: `trajectories` (the Parquet table and its reader/writer), `rows` (a Trajectory <-> one
row), `turns` (the per-turn table), `migrations` (older schema versions read forward)."""
