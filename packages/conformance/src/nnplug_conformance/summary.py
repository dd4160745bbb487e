"""Tallies of the conformance run and the summary table printed at its end."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

SECTIONS = {
    "test_registration": "registration and ABI",
    "test_device_api": "device API",
    "test_onnx_nodes": "ONNX node tests",
    "test_edge_values": "edge values",
    "test_custom_ops": "custom ops",
}
NOT_CLAIMED = "not claimed"
"""Prefix of the skip reason of node tests whose ops the backend (or op) does not take."""
NOT_COMPARED = "VALUES NOT COMPARED"
"""Prefix of the skip reason of value checks that had no reference to compare with."""


@dataclass
class Tally:
    outcome: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/skipped/unclaimed
    section: dict[str, str] = field(default_factory=dict)
    ops: dict[str, list[str]] = field(default_factory=dict)  # node test nodeid -> op types
    not_compared: dict[str, str] = field(default_factory=dict)  # nodeid -> why (skip reason)

    def record(self, report) -> None:
        module = report.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        if module not in SECTIONS:
            return
        nid = report.nodeid
        self.section[nid] = SECTIONS[module]
        for key, value in report.user_properties:
            if key == "nnplug_ops":
                self.ops[nid] = list(value)
        prev = self.outcome.get(nid)
        if report.failed:
            self.outcome[nid] = "failed"
        elif report.skipped and prev != "failed":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.outcome[nid] = "unclaimed" if NOT_CLAIMED in reason else "skipped"
            if NOT_COMPARED in reason:
                self.not_compared[nid] = reason[reason.index(NOT_COMPARED):]
        elif report.when == "call" and report.passed and prev is None:
            self.outcome[nid] = "passed"

    def rows(self):
        counts = defaultdict(lambda: defaultdict(int))
        for nid, outcome in self.outcome.items():
            counts[self.section[nid]][outcome] += 1
        order = [s for s in SECTIONS.values() if s in counts]
        rows = [(s, counts[s]["passed"], counts[s]["failed"], counts[s]["skipped"],
                 counts[s]["unclaimed"]) for s in order]
        total = ("total", *(sum(r[i] for r in rows) for i in range(1, 5)))
        return rows, total

    def op_coverage(self):
        """(ops with every claimed test passing, ops with failures {op: n})."""
        passing, failing = set(), defaultdict(int)
        for nid, ops in self.ops.items():
            outcome = self.outcome.get(nid)
            for op in ops:
                if outcome == "failed":
                    failing[op] += 1
                elif outcome == "passed":
                    passing.add(op)
        return sorted(passing - set(failing)), dict(sorted(failing.items()))

    def text(self, title: str) -> list[str]:
        rows, total = self.rows()
        lines = [title, f"{'section':<24}{'passed':>8}{'failed':>8}{'skipped':>9}{'not claimed':>13}"]
        for r in [*rows, total]:
            lines.append(f"{r[0]:<24}{r[1]:>8}{r[2]:>8}{r[3]:>9}{r[4] or '':>13}".rstrip())
        passing, failing = self.op_coverage()
        if self.ops:
            lines.append(f"ops covered (all their node tests pass): {len(passing)}"
                         + (f": {', '.join(passing)}" if passing else ""))
            lines.append(f"ops with failures: {len(failing)}" + (
                ": " + ", ".join(f"{op} ({n})" for op, n in failing.items()) if failing else ""))
        lines += self.warnings()
        return lines

    def warnings(self) -> list[str]:
        """What the table cannot show: checks that passed without looking at the values."""
        reasons = sorted(set(self.not_compared.values()))
        if not reasons:
            return []
        return ["WARNING: the results of these ops were NOT compared with any reference "
                "(their other checks passing says nothing about their values):",
                *(f"  {r}" for r in reasons)]

    def markdown(self, title: str) -> str:
        rows, total = self.rows()
        out = [f"{title}\n", "| section | passed | failed | skipped | not claimed |",
               "|---|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |")
        out.append(f"| **{total[0]}** | **{total[1]}** | **{total[2]}** | **{total[3]}** | "
                   f"**{total[4]}** |")
        passing, failing = self.op_coverage()
        if self.ops:
            out.append("")
            out.append(f"Ops covered (every claimed node test passes): {len(passing)}"
                       + (f": {', '.join(passing)}." if passing else "."))
            out.append("")
            out.append(f"Ops with failures: {len(failing)}" + (
                ": " + ", ".join(f"{op} ({n})" for op, n in failing.items()) + "."
                if failing else "."))
        warnings = self.warnings()
        if warnings:
            out += ["", f"**{warnings[0]}**", "", *(f"- {w.strip()}" for w in warnings[1:])]
        return "\n".join(out) + "\n"
