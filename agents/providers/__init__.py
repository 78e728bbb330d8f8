"""The project's own LiteLLM providers: `oracle/<family>`, the SIMULATED `showwork/<family>` expert and (in
`agents.flawed`) the SIMULATED `flawed/<family>@<profile>` student, registered by `registry`."""
