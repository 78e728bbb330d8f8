"""Write hK' (`harness_hKp/<family>.yaml`): h0 plus every knowledge item of the family's card, each worded as
`heldout_wording/<family>.yaml` words it -- wordings written apart from M1's generator and never read by it
(tests/test_micro_wording.py checks that none shares a run of 6 words with the card or the generator's bank).
deploy/micro/evaluate.sh measures a student under it with HARNESSES="h0 hK hKp".

    PYTHONPATH=$PWD .venv/bin/python deploy/micro1/write_heldout_harnesses.py [MODEL_DIR]   (default deploy/micro1)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from harness.baseline import baseline
from harness.edits import InsertSection, apply_edits
from harness.evolution.cards import section_id
from harness.program import Harness, PromptSection

HERE = Path(__file__).resolve().parent


def heldout_harness(family: str) -> Harness:
    data = yaml.safe_load((HERE / "heldout_wording" / f"{family}.yaml").read_text())
    edits = [InsertSection(section=PromptSection(id=section_id(i["key"]), kind="domain_recipe", title=i["title"],
                                                 text=i["text"])) for i in data["items"]]
    return apply_edits(baseline(family), edits).model_copy(update={"name": f"hKp/{family}"})


def main(model_dir: Path) -> None:
    for path in sorted((HERE / "heldout_wording").glob("*.yaml")):
        print(heldout_harness(path.stem).dump(model_dir / "harness_hKp" / f"{path.stem}.yaml"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
