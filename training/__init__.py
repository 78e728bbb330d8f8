"""Trajectories -> masked token sequences -> LoRA-SFT adapters that vLLM serves."""
