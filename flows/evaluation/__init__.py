"""The evaluation job: a flow of evaluation stages (flow.py) and its attribution, correction, imitation and training
stages."""
