"""anomaly_detection verifier: the uploaded report against the generator's ground truth (see
docs/tasks_services.md). Rows match one-to-one by sensor code, time within TIME_TOLERANCE_S and value
within VALUE_TOLERANCE; unparseable rows count as false positives. It reads an `AnomalyDetectionSnapshot`
(the report object's text, copied out of the bucket), never the environment itself."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict

from tasks.anomaly_detection.data import (
    MIN_SCORE,
    REPORT_COLUMNS,
    TIME_TOLERANCE_S,
    VALUE_TOLERANCE,
    AnomalyPayload,
    Reading,
    ground_truth,
    parse_iso,
)
from tasks.records import TaskInstance, Verdict

CHECK_NAMES = ("report_uploaded", "required_columns", "precision", "recall")


class AnomalyDetectionSnapshot(BaseModel):
    """What the verifier reads: the text of the object at the instance's report key (None: not uploaded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    report: str | None


def parse_time(text: str) -> datetime | None:
    text = text.strip()
    try:
        if text.replace(".", "", 1).isdigit():
            return datetime.fromtimestamp(float(text), tz=timezone.utc)
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def score_report(text: str, truth: list[Reading]) -> tuple[dict[str, bool], dict[str, str]]:
    checks: dict[str, bool] = {}
    why: dict[str, str] = {}
    try:
        rows = list(csv.reader(io.StringIO(text.strip())))
    except csv.Error as e:  # e.g. a field over csv's 131,072-character limit: not a readable report at all
        checks = {"required_columns": False, "precision": False, "recall": False}
        return checks, {k: f"the report is not readable CSV ({e})" for k in checks}
    header = [h.strip().casefold() for h in rows[0]] if rows else []
    missing = [c for c in REPORT_COLUMNS if c not in header]
    checks["required_columns"] = not missing
    why["required_columns"] = f"header lacks {missing}; it must include {','.join(REPORT_COLUMNS)}"
    if missing:
        checks["precision"] = checks["recall"] = False
        why["precision"] = why["recall"] = "not scored: required columns missing"
        return checks, why
    idx = [header.index(c) for c in REPORT_COLUMNS]
    reported: list[tuple[str, datetime, float] | None] = []
    raw: list[list[str]] = []  # the non-blank rows, parallel to `reported`, for the feedback
    for row in rows[1:]:
        if not any(c.strip() for c in row):
            continue
        raw.append(row)
        try:
            sid, ts, val = (row[i].strip() for i in idx)
            when = parse_time(ts)
            reported.append((sid.upper(), when, float(val)) if when else None)
        except (IndexError, ValueError):
            reported.append(None)
    used = [False] * len(reported)
    matched = 0
    unmatched_truth = []
    for sid, ts, val in truth:
        t = parse_iso(ts)
        for j, r in enumerate(reported):
            if (not used[j] and r is not None and r[0] == sid.upper()
                    and abs((r[1] - t).total_seconds()) <= TIME_TOLERANCE_S
                    and abs(r[2] - val) <= VALUE_TOLERANCE + 1e-9):  # epsilon: 2-decimal floats
                used[j] = True
                matched += 1
                break
        else:
            unmatched_truth.append(f"{sid}@{ts}")
    precision = matched / len(reported) if reported else 0.0
    recall = matched / len(truth) if truth else 1.0
    extra = [",".join(row) for row, u in zip(raw, used, strict=True) if not u][:3]
    checks["precision"] = precision >= MIN_SCORE
    why["precision"] = (f"precision {precision:.3f} < {MIN_SCORE}: {len(reported) - matched} of {len(reported)} rows "
                        f"match no anomaly (e.g. {extra})")
    checks["recall"] = recall >= MIN_SCORE
    why["recall"] = (f"recall {recall:.3f} < {MIN_SCORE}: {len(unmatched_truth)} of {len(truth)} anomalies not "
                     f"reported (e.g. {unmatched_truth[:3]})")
    return checks, why


def verify(instance: TaskInstance, snap: AnomalyDetectionSnapshot) -> Verdict:
    p = AnomalyPayload.model_validate(instance.payload)
    text = snap.report
    checks = {"report_uploaded": text is not None}
    why = {"report_uploaded": f"no object at {p.report_key}"}
    if text is None:
        checks.update({"required_columns": False, "precision": False, "recall": False})
        why.update({k: "no report" for k in ("required_columns", "precision", "recall")})
    else:
        c, w = score_report(text, ground_truth(p))
        checks.update(c)
        why.update(w)
    return Verdict.from_checks(checks, why)
