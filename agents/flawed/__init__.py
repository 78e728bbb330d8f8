"""The flawed student `flawed/<family>@<profile>`: the task oracle with injected, labelled faults (a simulation).

A LiteLLM custom provider (`provider.FlawedLLM`, registered by `agents.client`) that acts like the oracle
from its own belief of the environment, and at each turn may inject one fault of the failure ontology drawn
from a profile (`profiles.yaml`). Each fault comes back as `InjectedFault` ground truth that only
measurement code reads (`Trajectory.view()` drops it). See docs/flawed.md.
"""
