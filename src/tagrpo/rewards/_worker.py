"""Worker process for MathVerifier: reads {"gold", "pred"} JSON lines, answers {"ok": bool}.
Run as `python -m tagrpo.rewards._worker`; the parent enforces the hard timeout."""

from __future__ import annotations

import json
import sys


def check(gold: str, pred: str) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    g = parse("\\boxed{" + gold + "}", extraction_config=cfg)
    p = parse("\\boxed{" + pred + "}", extraction_config=cfg)
    if not g or not p:
        return False
    return bool(verify(g, p))


def main() -> None:
    for line in sys.stdin:
        try:
            req = json.loads(line)
            ok = check(str(req["gold"]), str(req["pred"]))
        except Exception:  # noqa: BLE001 - report as not equal, keep serving
            ok = False
        sys.stdout.write(json.dumps({"ok": ok}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
