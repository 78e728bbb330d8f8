"""vLLM launchers, the tiny local model builder, configs. Others import only the launch helpers."""
