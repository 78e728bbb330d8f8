"""The co-evolution round: its Prefect flow (flow.py), config, context, plan, stages, runner and gate."""
