"""Baseline harness h0 per family: a short role prompt, every environment tool, no hooks, plain context.

`baseline(family)` reads `harness/baselines/<family>.yaml` when it exists (committed files, so h0 is stable
and reviewable); otherwise it builds h0 from the family's environment tools. `write_baselines()` writes
the files for every installed family.
"""

from __future__ import annotations

from pathlib import Path

from harness.program import Harness, PromptSection, ToolPolicy

BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
ROLE_PROMPT = (
    "You are an assistant that completes business tasks by calling the tools provided. Use the tools to "
    "look things up and to make changes. When the task is complete, reply with your final answer as plain "
    "text and no tool call."
)


def generate_baseline(family: str) -> Harness:
    import tasks  # lazy: tasks is light, but only baselines need it

    fam = tasks.get(family)
    env = fam.make_env(fam.generate(0))  # construction is cheap by contract; tools() needs no reset
    try:
        specs = env.tools()
    finally:
        env.close()
    return Harness(
        name=f"h0/{family}",
        sections=[PromptSection(id="role", kind="role", text=ROLE_PROMPT)],
        tools=ToolPolicy(descriptions={t.name: t.description for t in specs}),
    )


def baseline(family: str) -> Harness:
    path = BASELINE_DIR / f"{family}.yaml"
    if path.exists():
        return Harness.load(path)
    return generate_baseline(family)


def write_baselines(families: list[str] | None = None) -> list[Path]:
    import tasks

    return [generate_baseline(f).dump(BASELINE_DIR / f"{f}.yaml") for f in (families or tasks.families())]


if __name__ == "__main__":  # python -m harness.baseline [family ...]: (re)write the stored h0 files
    import sys

    for p in write_baselines(sys.argv[1:] or None):
        print(p)
