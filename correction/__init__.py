"""The correction arm (and, from its own modules, the imitation arm): localize the failing turn t* of a
student's own failing rollout (`locators/`), let the expert rewrite only that turn (`rewrite.py`), select a
candidate (`selectors/`), and write the corrected trajectory with only t* marked for training (`rows.py`).
`pipeline.correct_one` ties them together; `records.py` holds the records. Episodes run through an injected
`runner.RolloutFn`, so nothing here starts Ray. See docs/correction.md.
"""
