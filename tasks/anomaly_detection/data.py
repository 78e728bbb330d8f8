"""anomaly_detection data: payload schema, seeded generator, the readings and the ground truth.

The payload holds the generator's parameters (not the ~5k readings); `readings()` rebuilds the rows from
`data_seed` with its own `random.Random`, so every process builds the same warehouse.
A reading is anomalous when its value is strictly below min or strictly above max of the sensor's range and
its timestamp is inside [window_start, window_end). Timestamps are data, never the wall clock.
easy: per-sensor ranges, readings carry the sensor code, 4 sensors every 10 minutes for a day.
hard: per-kind default ranges with per-sensor overrides, maintenance windows (readings inside them are not
      anomalies), duplicated rows from ingestion retries (report once), readings keyed by an integer that
      must be joined to the sensors table, 7-8 sensors every 10 minutes for two days.
Planted traps: values exactly at a bound (not anomalous), anomalies just outside the window and at its
exclusive end, anomalies inside maintenance windows, rows duplicated by ingestion retries.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict

from tasks.base import Draft

KINDS: dict[str, tuple[str, float, float]] = {  # kind -> (unit, typical min, typical max)
    "temperature": ("degC", 18.0, 27.0),
    "humidity": ("percent", 30.0, 60.0),
    "pressure": ("kPa", 98.0, 104.0),
    "vibration": ("mm/s", 0.5, 7.1),
    "power": ("kW", 10.0, 45.0),
}
SITES = ["plant-a", "plant-b", "warehouse-3", "lab-2"]
PARAMS_KEY = "config/sensor_params.json"
REPORT_COLUMNS = ["sensor_id", "timestamp", "value"]
TIME_TOLERANCE_S = 60
VALUE_TOLERANCE = 0.01
MIN_SCORE = 0.95


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Sensor(_Model):
    pk: int
    id: str
    kind: str
    unit: str
    site: str


class Range(_Model):
    min: float
    max: float


class Maintenance(_Model):
    sensor_id: str
    start: str
    end: str


class AnomalyPayload(_Model):
    hard: bool
    data_seed: int
    start: str  # first reading time (ISO, UTC)
    step_s: int
    n_steps: int
    sensors: list[Sensor]
    ranges: dict[str, Range]  # easy: sensor id -> range; hard: kind -> default range
    overrides: dict[str, Range]  # hard: sensor id -> range replacing its kind's default
    maintenance: list[Maintenance]
    window_start: str
    window_end: str
    report_key: str


Reading = tuple[str, str, float]  # (sensor id, ISO timestamp, value)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def range_of(p: AnomalyPayload, sensor: Sensor) -> Range:
    if not p.hard:
        return p.ranges[sensor.id]
    return p.overrides.get(sensor.id, p.ranges[sensor.kind])


def in_maintenance(p: AnomalyPayload, sensor_id: str, ts: str) -> bool:
    return any(m.sensor_id == sensor_id and m.start <= ts < m.end for m in p.maintenance)


def readings(p: AnomalyPayload) -> list[Reading]:
    """All rows of the warehouse, in insertion order (duplicates included)."""
    rng = random.Random(p.data_seed)
    t0 = parse_iso(p.start)
    times = [iso(t0 + timedelta(seconds=i * p.step_s)) for i in range(p.n_steps)]
    w0 = times.index(p.window_start)
    w1 = times.index(p.window_end)
    by_sensor: dict[str, list[float]] = {}
    for s in p.sensors:
        r = range_of(p, s)
        width = r.max - r.min
        mid = (r.min + r.max) / 2
        values = [round(mid + rng.uniform(-0.4, 0.4) * width, 2) for _ in times]
        inside = rng.sample(range(w0 + 1, w1 - 1), rng.randint(3, 6))
        outside = rng.sample([j for j in range(p.n_steps) if j < w0 - 1 or j > w1], 2)  # not to be reported
        for i in inside + outside:
            margin = rng.uniform(0.05, 0.3) * width
            values[i] = round(r.max + margin if rng.random() < 0.6 else r.min - margin, 2)
        for i in rng.sample([j for j in range(w0 + 1, w1 - 1) if j not in inside], 2):
            values[i] = r.max if rng.random() < 0.5 else r.min  # exactly at a bound: not anomalous
        by_sensor[s.id] = values
    # Window edges: an anomaly exactly at window_start (reported) and one at window_end (not reported).
    first, last = p.sensors[0], p.sensors[-1]
    by_sensor[first.id][w0] = round(range_of(p, first).max + 1.5, 2)
    by_sensor[last.id][w1] = round(range_of(p, last).min - 1.5, 2)
    # Each maintenance window starts with two planted anomalies (excluded from the truth).
    for m in p.maintenance:
        r = range_of(p, next(s for s in p.sensors if s.id == m.sensor_id))
        i = times.index(m.start)
        by_sensor[m.sensor_id][i] = round(r.max + 2.0, 2)
        by_sensor[m.sensor_id][i + 1] = round(r.min - 2.0, 2)
    rows = [(sid, t, v) for sid, values in by_sensor.items() for t, v in zip(times, values, strict=True)]
    if p.hard:  # ingestion retries: some rows twice, always including a few anomalies
        truth = set(ground_truth_from(p, rows))
        anomalous = [i for i, row in enumerate(rows) if row in truth]
        dup = sorted(set(rng.sample(range(len(rows)), len(rows) // 50)) | set(rng.sample(anomalous, 2)))
        rows = rows + [rows[i] for i in dup]
    return rows


def ground_truth_from(p: AnomalyPayload, rows: list[Reading]) -> list[Reading]:
    bounds = {s.id: (range_of(p, s).min, range_of(p, s).max) for s in p.sensors}
    pauses: dict[str, list[tuple[str, str]]] = {}
    for m in p.maintenance:
        pauses.setdefault(m.sensor_id, []).append((m.start, m.end))
    out: dict[tuple[str, str], Reading] = {}
    ws, we = p.window_start, p.window_end
    for sid, ts, v in rows:
        lo, hi = bounds[sid]
        if (v < lo or v > hi) and ws <= ts < we and not any(a <= ts < b for a, b in pauses.get(sid, ())):
            out.setdefault((sid, ts), (sid, ts, v))
    return sorted(out.values())


def ground_truth(p: AnomalyPayload) -> list[Reading]:
    return ground_truth_from(p, readings(p))


def params_document(p: AnomalyPayload) -> dict[str, object]:
    """The parameter file as it lies in the bucket."""
    rule = "A reading is anomalous when value < min or value > max (the bounds themselves are normal)."
    if not p.hard:
        return {"version": 2, "rule": rule, "sensors": {k: v.model_dump() for k, v in p.ranges.items()}}
    return {
        "version": 5, "rule": rule + " A sensor's override replaces its kind's default range. Readings inside a "
        "sensor's maintenance window [start, end) are never anomalies.",
        "defaults_by_kind": {k: v.model_dump() for k, v in p.ranges.items()},
        "overrides": {k: v.model_dump() for k, v in p.overrides.items()},
        "maintenance": [m.model_dump() for m in p.maintenance],
    }


def _bounds(rng: random.Random, kind: str) -> Range:
    _, lo, hi = KINDS[kind]
    width = hi - lo
    lo2 = round(lo + rng.uniform(-0.1, 0.1) * width, 1)
    return Range(min=lo2, max=round(lo2 + width * rng.uniform(0.9, 1.1), 1))


def generate_payload(rng: random.Random, hard: bool) -> AnomalyPayload:
    day = datetime(2024, rng.randint(1, 12), rng.randint(1, 28), tzinfo=timezone.utc)
    step_s = 600
    n_steps = (2 * 86_400 if hard else 86_400) // step_s
    n_sensors = rng.randint(7, 8) if hard else 4
    kinds = sorted(KINDS)
    sensors = []
    for i in range(n_sensors):
        kind = kinds[i % len(kinds)] if hard else rng.choice(kinds)
        sensors.append(Sensor(pk=101 + i * 7, id=f"{kind[:3].upper()}-{i + 1:02d}", kind=kind, unit=KINDS[kind][0],
                              site=rng.choice(SITES)))
    if hard:
        ranges = {k: _bounds(rng, k) for k in sorted({s.kind for s in sensors})}
        overrides = {}
        for s in rng.sample(sensors, 3):
            d = ranges[s.kind]
            shift = (d.max - d.min) * rng.choice([-0.3, 0.25, 0.35])
            overrides[s.id] = Range(min=round(d.min + shift, 1), max=round(d.max + shift, 1))
    else:
        ranges = {s.id: _bounds(rng, s.kind) for s in sensors}
        overrides = {}
    # The window: a whole number of hours inside the data, away from its ends.
    w0 = rng.randint(n_steps // 6, n_steps // 3)
    w1 = w0 + rng.randint(n_steps // 3, n_steps // 2)
    w0 -= w0 % (3600 // step_s)
    w1 -= w1 % (3600 // step_s)
    t = lambda i: iso(day + timedelta(seconds=i * step_s))  # noqa: E731
    maintenance = []
    if hard:
        for s in rng.sample(sensors, 2):
            m0 = rng.randint(w0 + 5, w1 - 30)
            maintenance.append(Maintenance(sensor_id=s.id, start=t(m0), end=t(m0 + rng.randint(6, 24))))
    return AnomalyPayload(
        hard=hard, data_seed=rng.randrange(2**31), start=iso(day), step_s=step_s, n_steps=n_steps, sensors=sensors,
        ranges=ranges, overrides=overrides, maintenance=maintenance, window_start=t(w0), window_end=t(w1),
        report_key=f"reports/anomalies_{t(w0)[:10]}_{t(w0)[11:13]}h.csv",
    )


def instruction(p: AnomalyPayload) -> str:
    cols = ",".join(REPORT_COLUMNS)
    return (
        "The sensor-readings warehouse (SQLite, read-only; query it with the SQL tool) holds readings from our "
        f"sensors. The operating ranges and rules are in the parameter file {PARAMS_KEY} in the storage bucket.\n"
        f"Find every anomalous reading with a timestamp in the window [{p.window_start}, {p.window_end}) (start "
        "inclusive, end exclusive) and upload an anomaly report as CSV to the bucket at "
        f"{p.report_key}, with the header {cols} (one row per anomalous reading: the sensor's code such as "
        f"{p.sensors[0].id}, the reading's ISO timestamp, the value; extra columns are allowed).\n"
        f"Scoring: rows are matched to the true anomalies within {TIME_TOLERANCE_S} seconds and {VALUE_TOLERANCE} "
        f"in value; precision and recall must both be at least {MIN_SCORE}."
    )


def draft(index: int, rng: random.Random) -> Draft:
    """Even indices are easy, odd ones hard, so every split holds both levels."""
    hard = index % 2 == 1
    p = generate_payload(rng, hard)
    return Draft(instruction=instruction(p), difficulty="hard" if hard else "easy", payload=p.model_dump())
