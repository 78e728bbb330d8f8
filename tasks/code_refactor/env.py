"""code_refactor environment: the generated package in a workspace (the shared workspace tools); the
verifier judges a frozen copy of it (verify.py)."""

from __future__ import annotations

from pathlib import Path

from tasks.code_refactor.data import Spec
from tasks.code_refactor.package import render
from tasks.code_refactor.verify import CodeRefactorSnapshot, verify
from tasks.records import Verdict
from tasks.runtime.workspace import WorkspaceEnvironment


class CodeRefactorEnv(WorkspaceEnvironment):
    @property
    def spec(self) -> Spec:
        return Spec.model_validate(self.instance.payload["spec"])

    def _populate(self, root: Path) -> None:
        for rel, content in render(self.spec, after=False).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)

    def snapshot(self) -> CodeRefactorSnapshot:
        return CodeRefactorSnapshot(workspace=self.workspace_copy())

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())
