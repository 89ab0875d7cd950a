"""Worker process for MathVerifier: announces {"ready": true} once math-verify is imported, then
reads {"gold", "pred"} JSON lines and answers {"ok": bool} for each.
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
    # Import and warm up math-verify/sympy (parsers are built lazily) before announcing
    # readiness, so the parent's per-check timeout never has to cover that one-time cost.
    try:
        check("1/2", "0.5")
    except Exception:  # noqa: BLE001 - a broken install shows up as "not equal" later
        pass
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
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
