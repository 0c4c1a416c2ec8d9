"""Sentences about execution providers built from the records a run measured, never from what the machine is
assumed to be: a run whose CUDA rows ran on a GPU while TensorRT was missing says exactly that.

    summary = ProviderSummary.of(records)   # raw_engines records (available=False rows carry the reason)
    summary.sentence()                      # "Measured on cpu, cuda. Not run here: tensorrt (no TensorRT …)."
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.vocabulary import Provider


@dataclass(frozen=True)
class ProviderSummary:
    measured: tuple[str, ...]  # providers with at least one measured row, in Provider order
    not_run: dict[str, str] = field(default_factory=dict)  # provider -> the engine's reason (first one recorded)

    @classmethod
    def of(cls, records: list[dict]) -> ProviderSummary:
        measured = {r.get("provider") for r in records if r.get("throughput_img_s")}
        not_run: dict[str, str] = {}
        for r in records:
            p = r.get("provider")
            if r.get("available") is False and p not in measured:
                not_run.setdefault(p, _reason(r.get("note", "")))
        return cls(tuple(p for p in Provider if p in measured), {p: not_run[p] for p in Provider if p in not_run})

    @property
    def cpu_only(self) -> bool:
        return self.measured == ("cpu",)

    def sentence(self) -> str:
        parts = [f"Measured on {', '.join(self.measured)}" + (" — every number above is CPU-only." if self.cpu_only
                                                              else ".") if self.measured else "Nothing was measured."]
        if self.not_run:
            parts.append("Not run here: " + "; ".join(f"{p} ({why})" for p, why in self.not_run.items()) + ".")
        return " ".join(parts)


def _reason(note: str) -> str:
    """The engine's message without the exception's class name, cut at its first clause (outside parentheses)."""
    head, sep, rest = note.partition(": ")
    text = rest if sep and head.endswith("Error") else note
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text[i : i + 2] in (": ", "; "):
            text = text[:i]
            break
    return text.strip() or "no reason recorded"


def cpu_nodes_note(profile: dict) -> str:
    """For an ort_profile record on a GPU provider: how many nodes ONNX Runtime placed on the CPU anyway (the
    int8 graph's quantize nodes on CUDA), so a row that was not all-GPU says so. "" when none were."""
    n = profile.get("n_cpu_fallback_nodes") or 0
    total = sum((profile.get("nodes_by_provider") or {}).values())
    return f"{n} of {total} nodes ran on the CPU (ONNX Runtime's profile)" if n else ""
