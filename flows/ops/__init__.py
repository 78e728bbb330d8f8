"""Operations: the run registry, the nightly evaluation and the Prefect deployments."""
