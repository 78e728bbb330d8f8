"""Every `coevo` subcommand absorbs bad input (#12 §6): one line on stderr naming the option or key, exit 2,
never a traceback.

The CLI takes seconds to import on a busy machine, so the cases run in one subprocess that imports it once and
calls the real entry point (`flows.cli.app`, the object `coevo` runs) per case, with file descriptors 1 and 2
redirected, so anything the command or a library prints is caught. Two cases also run as `python -m flows.cli`
in their own process (the entry point end to end), alongside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-fake-cli-" + "5e1d" * 8

DRIVER = r"""
import json, os, sys, tempfile, traceback
cases = json.loads(sys.stdin.read())
from flows.cli import app
results = []
for args in cases:
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out_f.fileno(), 1); os.dup2(err_f.fileno(), 2)
    escaped = ""
    try:
        app(args=args, prog_name="coevo")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        escaped, code = traceback.format_exc(), -1
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2); os.close(saved[0]); os.close(saved[1])
    out_f.seek(0); err_f.seek(0)
    results.append({"args": args, "code": code, "stdout": out_f.read().decode(errors="replace"),
                    "stderr": err_f.read().decode(errors="replace") + escaped})
print("RESULTS " + json.dumps(results))
"""


def _files(d: Path) -> dict[str, str]:
    """Bad inputs on disk; returns name -> path."""
    (d / "empty").mkdir()
    (d / "model").mkdir()
    files = {
        "bad.yaml": "sections: [unclosed\n  : : :\n",
        "bad.json": "{not json",
        "list.yaml": "- a\n- b\n",
        "deep.json": "[" * 100_000,
        "deep.yaml": "[" * 100_000,
        "afile.txt": "plain text, not a table\n",
        "cfg_key.yaml": yaml.safe_dump({"models": {"expert": {"model": "openai/gpt-4o-mini", "api_key": FAKE_KEY}}}),
        "cfg_neg.yaml": yaml.safe_dump({"models": {"expert": {"model": "oracle/{family}"}},
                                        "evaluation": {"seeds": -1, "pairs": [{"model": "expert"}]}}),
        "cfg_family.yaml": yaml.safe_dump({"models": {"expert": {"model": "oracle/{family}"}}, "families": ["nope"],
                                           "evaluation": {"pairs": [{"model": "expert"}]}}),
        "cfg_limits.yaml": yaml.safe_dump({"models": {"expert": {"model": "oracle/{family}"}},
                                           "limits": {"max_turns": -3}, "evaluation": {"pairs": [{"model": "expert"}]}}),
        "cfg_ok.yaml": yaml.safe_dump({"runs_dir": str(d / "runs"), "models": {"expert": {"model": "oracle/{family}"}},
                                       "evaluation": {"pairs": [{"model": "expert"}]}}),
    }
    out = {"dir": str(d), "empty": str(d / "empty"), "model": str(d / "model"), "missing": str(d / "missing"),
           "out": str(d / "out")}
    for name, text in files.items():
        (d / name).write_text(text)
        out[name] = str(d / name)
    return out


def _cases(f: dict[str, str]) -> list[tuple[list[str], str]]:
    """(argv, text the error output must contain): the text names the option, key or value at fault."""
    roll = ["rollout", "--model", "oracle/{family}", "--out", f["out"], "--family", "payroll_audit"]
    evo = ["evolve", "--family", "payroll_audit", "--student", "oracle/{family}", "--out", f["out"],
           "--budget-rollouts", "2"]
    cases: list[tuple[list[str], str]] = [
        (["tasks", "check", "--family", "nope"], "nope"),
        (["tasks", "check", "--split", "bogus"], "bogus"),
        (["tasks", "check", "--workers", "-1"], "--workers"),
        (["model", "tiny", "--out", f["afile.txt"] + "/sub"], "--out"),
        (["model", "tiny", "--out", f["out"], "--seed", "abc"], "--seed"),
        (["serve", "start", "--model", f["missing"]], "--model"),
        (["serve", "start", "--model", f["model"], "--host", "0.0.0.0"], "--api-key-env"),
        (["serve", "start", "--model", f["model"], "--host", "0.0.0.0", "--api-key-env", "COEVO_UNSET_VAR"],
         "COEVO_UNSET_VAR"),
        (["serve", "start", "--model", f["model"], "--port", "80"], "--port"),
        (["serve", "start", "--model", f["model"], "--device", "tpu"], "--device"),
        (["serve", "load-adapter", "--name", "a@1", "--path", f["missing"]], "--path"),
        (["serve", "load-adapter", "--name", "a@1", "--path", f["model"], "--api-key-env", "COEVO_UNSET_VAR"],
         "COEVO_UNSET_VAR"),
        ([*roll, "--harness", f["bad.yaml"]], "--harness"),
        ([*roll, "--harness", f["bad.json"]], "--harness"),
        ([*roll, "--harness", f["list.yaml"]], "--harness"),
        ([*roll, "--harness", f["deep.json"]], "--harness"),
        ([*roll, "--harness", f["deep.yaml"]], "--harness"),
        ([*roll, "--harness", f["missing"]], "--harness"),
        ([*roll, "--max-turns", "-1"], "--max-turns"),
        ([*roll, "--wall-s", "-5"], "--wall-s"),
        ([*roll, "--max-tool-calls-per-turn", "0"], "--max-tool-calls-per-turn"),
        ([*roll, "--family", "nope"], "nope"),
        ([*roll, "--split", "bogus"], "--split"),
        ([*roll, "--n", "-1"], "--n"),
        ([*roll, "--seeds", "0"], "--seeds"),
        (["rollout", "--model", "noprefix", "--out", f["out"]], "--model"),
        ([*roll, "--api-key-env", "COEVO_UNSET_VAR"], "COEVO_UNSET_VAR"),
        ([*roll, "--api-key-env", "not a name"], "--api-key-env"),
        ([*evo, "--api-key-env", "COEVO_UNSET_VAR"], "COEVO_UNSET_VAR"),
        (["rollout", "--model", "oracle/{family}", "--out", f["afile.txt"]], "--out"),
        (["dataset", "build", "--trajectories", f["missing"], "--tokenizer", f["model"], "--out", f["out"]],
         "--trajectories"),
        (["dataset", "build", "--trajectories", f["empty"], "--tokenizer", f["model"], "--out", f["out"]],
         "--trajectories"),
        (["dataset", "build", "--trajectories", f["afile.txt"], "--tokenizer", f["model"], "--out", f["out"]],
         "--trajectories"),
        (["dataset", "build", "--trajectories", f["empty"], "--tokenizer", f["missing"], "--out", f["out"]],
         "--tokenizer"),
        (["dataset", "build", "--trajectories", f["empty"], "--tokenizer", f["model"], "--out", f["out"],
          "--mask", "turns", "--turns", f["bad.json"]], "--turns"),
        (["dataset", "build", "--trajectories", f["empty"], "--tokenizer", f["model"], "--out", f["out"],
          "--max-len", "-1"], "--max-len"),
        (["train", "--data", f["missing"], "--base", f["model"], "--out", f["out"]], "--data"),
        (["train", "--data", f["empty"], "--base", f["missing"], "--out", f["out"]], "--base"),
        (["train", "--data", f["empty"], "--base", f["model"], "--out", f["out"], "--rank", "-1"], "--rank"),
        (["train", "--data", f["empty"], "--base", f["model"], "--out", f["out"], "--serve-port", "8000"], "--name"),
        (["train", "--data", f["empty"], "--base", f["model"], "--out", f["out"], "--serve-port", "8000", "--name",
          "s@1", "--serve-api-key-env", "COEVO_UNSET_VAR"], "COEVO_UNSET_VAR"),
        (["run"], "--config"),
        (["run", "--config", f["missing"]], "not found"),
        (["run", "--config", f["bad.yaml"]], "not valid YAML"),
        (["run", "--config", f["deep.yaml"]], "deep.yaml"),
        (["run", "--config", f["list.yaml"]], "mapping"),
        (["run", "--config", f["cfg_key.yaml"]], "api_key_env"),
        (["run", "--config", f["cfg_neg.yaml"]], "evaluation.seeds"),
        (["run", "--config", f["cfg_family.yaml"]], "nope"),
        (["run", "--config", f["cfg_limits.yaml"]], "limits.max_turns"),
        (["run", "--config", f["cfg_ok.yaml"], "--n-instances", "-1"], "n_instances"),
        (["run", "--config", f["cfg_ok.yaml"], "--families", "nope"], "nope"),
        (["run", "--resume", "../../etc"], "../../etc"),
        (["run", "--resume", "nope", "--runs-dir", f["dir"]], "nope"),
        (["report", "../../etc"], "../../etc"),
        (["report", "nope", "--runs-dir", f["dir"]], "nope"),
        (["dashboard", "--port", "-1"], "--port"),
        (["dashboard", "--port", "99999"], "--port"),
        (["attribute", "--trajectories", f["missing"], "--out", f["out"]], "--trajectories"),
        (["attribute", "--trajectories", f["empty"], "--out", f["out"]], "--trajectories"),
        (["attribute", "--trajectories", f["afile.txt"], "--out", f["out"]], "--trajectories"),
        (["attribute", "--trajectories", f["empty"], "--out", f["out"], "--attributor", "bogus"], "--attributor"),
        (["attribute", "--trajectories", f["empty"], "--out", f["out"], "--api-key-env", "COEVO_NOPE_KEY"],
         "--api-key-env"),
        (["attribute", "--trajectories", f["empty"], "--out", f["out"], "--attributor", "judge:hosted_vllm/j",
          "--api-key-env", "COEVO_NOPE_KEY"], "COEVO_NOPE_KEY"),
        ([*evo, "--family", "nope"], "nope"),
        ([*evo, "--harness", f["bad.yaml"]], "--harness"),
        ([*evo, "--harness", f["deep.json"]], "--harness"),
        ([*evo, "--wall-s", "-1"], "--wall-s"),
        ([*evo, "--minibatch-sampler", "bogus"], "minibatch_sampler"),
        ([*evo, "--max-turns", "0"], "--max-turns"),
        (["evolve", "--family", "payroll_audit", "--student", "noprefix", "--out", f["out"], "--budget-rollouts", "2"],
         "noprefix"),
        ([*evo, "--reflector", "bogus"], "bogus"),
        ([*evo, "--resume"], "--resume"),
        (["nosuchcommand"], "nosuchcommand"),
    ]
    return cases


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "COEVO_"))}
    env.update(PYTHONPATH=str(REPO), PREFECT_HOME=str(tmp / "prefect"), LITELLM_LOCAL_MODEL_COST_MAP="True",
               COLUMNS="200", NO_COLOR="1", TERM="dumb")
    return env


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("cli")
    f = _files(tmp)
    cases = _cases(f)
    env = _env(tmp)
    # two cases end to end through `python -m flows.cli`, started first so they overlap the driver
    e2e_args = [["run", "--config", f["bad.yaml"]], ["report", "../../etc"]]
    e2e = [subprocess.Popen([sys.executable, "-m", "flows.cli", *a], cwd=tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE) for a in e2e_args]
    driver = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([a for a, _ in cases]).encode(),
                            cwd=tmp, env=env, capture_output=True, timeout=600)
    line = next((x for x in driver.stdout.decode().splitlines()[::-1] if x.startswith("RESULTS ")), None)
    assert line, driver.stderr.decode(errors="replace")[-3000:]
    results = json.loads(line.removeprefix("RESULTS "))
    ends = []
    for a, p in zip(e2e_args, e2e):
        out, err = p.communicate(timeout=300)
        ends.append({"args": a, "code": p.returncode, "stdout": out.decode(errors="replace"),
                     "stderr": err.decode(errors="replace")})
    return {"cases": cases, "results": results, "e2e": ends, "out": f["out"]}


def _problems(results: list[dict], expected: list[str]) -> list[str]:
    problems = []
    for r, want in zip(results, expected, strict=True):
        both = r["stdout"] + r["stderr"]
        why = []
        if "Traceback" in both:
            why.append("traceback")
        if r["code"] != 2:
            why.append(f"exit {r['code']}")
        if not r["stderr"].strip():
            why.append("nothing on stderr")
        if want not in r["stderr"]:
            why.append(f"stderr does not name {want!r}")
        if FAKE_KEY in both:
            why.append("the key was echoed")
        if why:
            tail = " | ".join(both.strip().splitlines()[-3:])[:400]
            problems.append(f"coevo {' '.join(r['args'])[:160]}: {', '.join(why)}: {tail}")
    return problems


def test_every_bad_input_is_one_clear_error_and_exit_2(outcomes: dict) -> None:
    cases, results = outcomes["cases"], outcomes["results"]
    assert len(results) == len(cases) >= 60
    problems = _problems(results, [want for _, want in cases])
    assert not problems, f"{len(problems)} of {len(cases)} bad inputs:\n" + "\n".join(problems)
    # nothing ran: no run directory, no output directory, no trajectories
    assert not Path(outcomes["out"]).exists()


def test_the_entry_point_itself_exits_2_without_a_traceback(outcomes: dict) -> None:
    problems = _problems(outcomes["e2e"], ["not valid YAML", "../../etc"])
    assert not problems, "\n".join(problems)


def test_an_unexpected_failure_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The last net under the commands: an error no command anticipated is one line and exit 1."""
    code = ("import sys; from flows.cli import app\n"
            "@app.command('explode')\n"
            "def explode() -> None:\n"
            "    raise RuntimeError('boom')\n"
            "app(args=['explode'], prog_name='coevo')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    assert r.stderr.strip() == "coevo: failed: RuntimeError: boom"
