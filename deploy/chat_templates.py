"""The project's own chat templates (deploy/templates/*.jinja), chosen by name or from the model's config.

Each one is prefix-stable (rendering the first k messages is a token prefix of rendering k+1 before every
assistant turn), so `training.render` trains on exactly the token ids the vLLM server rendered, and none writes
think text back into a conversation, so think text never becomes trained content.

    servers: [{model: /models/Qwen3-8B, chat_template: qwen3, reasoning_parser: qwen3, enable_thinking: false}]
    servers: [{model: ..., chat_template: auto}]        # chosen from the model's config.json and tokenizer

`servers[].chat_template` is one of these names, `auto`, or a path to a .jinja file (the tokenizer's own
template when unset).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

TEMPLATE_DIR = Path(__file__).parent / "templates"
AUTO = "auto"


class TemplateSpec(BaseModel):
    """One of our templates and the server settings that go with it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="What `servers[].chat_template` names it by.")
    file: str = Field(description="The Jinja file under deploy/templates/.")
    tool_call_parser: str = Field(description="vLLM's --tool-call-parser that reads the calls this template writes.")
    reasoning_parser: str | None = Field(default=None, description="vLLM's --reasoning-parser for a thinking model.")
    thinking: bool = Field(default=False, description="The template honours `enable_thinking`.")
    tokens: tuple[str, ...] = Field(description="Tokens the tokenizer must hold as single tokens (turn and tool "
                                                "markers); a tokenizer without them cannot be served with it.")
    model_types: tuple[str, ...] = Field(description="config.json `model_type`s this template is chosen for by "
                                                     "`auto`.")

    @property
    def path(self) -> Path:
        return TEMPLATE_DIR / self.file


_QWEN_TURNS = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")
TEMPLATES: dict[str, TemplateSpec] = {t.name: t for t in (
    TemplateSpec(name="qwen3", file="qwen3.jinja", tool_call_parser="hermes", reasoning_parser="qwen3",
                 thinking=True, tokens=(*_QWEN_TURNS, "<think>", "</think>"), model_types=("qwen3", "qwen3_moe")),
    TemplateSpec(name="qwen3_coder", file="qwen3_coder.jinja", tool_call_parser="qwen3_coder",
                 tokens=_QWEN_TURNS, model_types=("qwen3_moe", "qwen3")),
    TemplateSpec(name="gemma4", file="gemma4.jinja", tool_call_parser="gemma4", reasoning_parser="gemma4",
                 tokens=("<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                         "<tool_response|>", '<|"|>'), model_types=("gemma4", "gemma4_text")),
)}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def choose_template(model_dir: str | Path) -> TemplateSpec | None:
    """Our template for this model, from its config.json `model_type` and its tokenizer's own template
    (Qwen3-Coder shares Qwen3's architectures; its own template writes `<function=` calls). None: no match."""
    model_dir = Path(model_dir)
    config = _read_json(model_dir / "config.json")
    model_type = str(config.get("model_type") or config.get("text_config", {}).get("model_type") or "")
    own = _read_json(model_dir / "tokenizer_config.json").get("chat_template") or ""
    if (model_dir / "chat_template.jinja").is_file():
        own = (model_dir / "chat_template.jinja").read_text(errors="replace")
    if model_type.startswith("qwen3"):
        return TEMPLATES["qwen3_coder" if "<function=" in str(own) else "qwen3"]
    if model_type.startswith("gemma4"):
        return TEMPLATES["gemma4"]
    return None


def template_spec(name: str | None, model_dir: str | Path) -> TemplateSpec | None:
    """The TemplateSpec `servers[].chat_template` names (`auto`: chosen from the model); None for a path or unset."""
    if name == AUTO:
        return choose_template(model_dir)
    return TEMPLATES.get(name or "")


def resolve_template(name: str | None, model_dir: str | Path) -> str | None:
    """The Jinja file to serve and train with: ours by name (or `auto`), else the given path; None = the
    tokenizer's own template (also what `auto` gives when no template of ours matches the model)."""
    if name is None:
        return None
    spec = template_spec(name, model_dir)
    if spec is not None:
        return str(spec.path)
    return None if name == AUTO else name


def template_kwargs(enable_thinking: bool | None) -> dict[str, bool]:
    """The chat-template variables a server setting fixes (vLLM --default-chat-template-kwargs; training renders
    with the same)."""
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}
