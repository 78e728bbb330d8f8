"""payroll_audit, a show-your-work demonstration policy for EASY instances (for training the micro student; the
pure oracle in oracle.py, which writes the outputs from the payload's ground truth, is unchanged and stays
the reference).

The whole audit is one Python program run with the `python` tool in the workspace, the same text for every
easy instance: it reads policy.md (its numbers by regular expressions over the policy's sentences),
roster.csv and attendance.csv, computes every figure, writes audit.csv and exceptions.json, and prints
them. Every value written is computed by code the trajectory shows, from files of the workspace. Hard
instances (pay_rates.csv, a second week in XLSX, an overtime limit) have no show-your-work policy here
(`applies` is False).

`knows` names the knowledge items (harness/evolution/cards/payroll_audit.yaml) the policy applies; the caller
decides it (training/micro/policies.py). Without `break_deduction_over_six_hours` the program leaves out the
unpaid break (`deduct_break = False`, its first line), so total_hours and gross_pay come out too high and the audit fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.payroll_audit.env import PayrollAuditEnv
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall

ALL_KNOWN = frozenset({"break_deduction_over_six_hours"})
# The policy's one harness-dependent choice is the program's first line, right after the prompt that states the
# rule or not, instead of ~400 tokens into a program whose text up to there is the same either way (the first
# M0 applied the rule in 1/3 of its programs under h0 AND under hK). The rest is the same text for every episode.
_PROGRAM = """deduct_break = {break_rule}
import csv, json, re
pol = open('policy.md').read()
h, m = re.search(r'start time is (\\d+):(\\d+)', pol).groups()
late_after = int(h) * 60 + int(m) + int(re.search(r'more than (\\d+) minutes', pol).group(1))
brk = re.search(r'longer than ([\\d.]+) hours, an unpaid break of (\\d+) minutes', pol)
brk_after, brk_min = float(brk.group(1)) * 60, int(brk.group(2))
ot = re.search(r'beyond ([\\d.]+) worked hours.*?paid at ([\\d.]+)x', pol)
regular, mult = float(ot.group(1)), float(ot.group(2))
roster = {r['employee_id']: r for r in csv.DictReader(open('roster.csv'))}
cols = ['headcount', 'days_worked', 'total_hours', 'overtime_hours', 'late_arrivals', 'gross_pay']
rows = {r['department']: dict.fromkeys(cols, 0) for r in roster.values()}
for r in roster.values():
    rows[r['department']]['headcount'] += 1
missing, unknown = [], set()
def mins(t):
    return int(t[:2]) * 60 + int(t[3:])
for p in csv.DictReader(open('attendance.csv')):
    e = roster.get(p['employee_id'])
    if e is None:
        unknown.add(p['employee_id'])
        continue
    if not p['clock_in'] or not p['clock_out']:
        missing.append({'employee_id': p['employee_id'], 'date': p['date']})
        continue
    span = mins(p['clock_out']) - mins(p['clock_in'])
    if deduct_break and span > brk_after:
        span -= brk_min
    hours = span / 60
    over = max(0.0, hours - regular)
    d = rows[e['department']]
    d['days_worked'] += 1
    d['total_hours'] += hours
    d['overtime_hours'] += over
    d['late_arrivals'] += mins(p['clock_in']) > late_after
    d['gross_pay'] += float(e['hourly_rate']) * (hours - over + over * mult)
with open('audit.csv', 'w', newline='') as f:
    w = csv.writer(f, lineterminator='\\n')
    w.writerow(['department'] + cols)
    for dep in sorted(rows):
        w.writerow([dep] + [round(rows[dep][c], 2) for c in cols])
doc = {'missing_punch': missing, 'unknown_employee': sorted(unknown)}
with open('exceptions.json', 'w') as f:
    json.dump(doc, f, indent=2)
print(open('audit.csv').read())
print(json.dumps(doc))
"""


def applies(instance: TaskInstance) -> bool:
    return instance.difficulty == "easy"


def program(knows: frozenset[str] = ALL_KNOWN) -> str:
    return _PROGRAM.replace("{break_rule}", str("break_deduction_over_six_hours" in knows))


def next_action(env: PayrollAuditEnv, history: Sequence[Step],
                knows: frozenset[str] = ALL_KNOWN) -> ToolCall | FinalAnswer:
    if not applies(env.instance):
        return FinalAnswer(text="This audit has inputs the program does not read; no files written.")
    ran = [s for s in history if s.call.name == "python"]
    if not ran or ran[-1].call.arguments != {"code": program(knows)}:  # none yet, or another program ran last
        return ToolCall(name="python", arguments={"code": program(knows)})
    if ran[-1].result.is_error or "[exit code 0]" not in ran[-1].result.content:
        return FinalAnswer(text="The audit program failed; see its output.")
    return FinalAnswer(text="Wrote audit.csv and exceptions.json from the attendance, roster and policy files.")
