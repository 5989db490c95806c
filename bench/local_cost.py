"""The local checks' own cost on one SavedModel: CPU seconds of the local checks at the numeric checks' point and
at the probe points, from one in-process audit (`probe_scales` 1e2 and 6e2: the two probe points that are checked),
with every check's status, so that two checkouts can be compared back to back:

    PYTHONPATH=OLD/src python3 bench/local_cost.py MODEL
    PYTHONPATH=NEW/src python3 bench/local_cost.py MODEL

CPU seconds (`time.process_time`, all threads) move less than wall time on a shared machine.
"""

from __future__ import annotations

import collections
import json
import sys
import time


def main(path: str) -> None:
    from gradaudit.api import audit_saved_model
    from gradaudit.numeric import local
    from gradaudit.results import AuditOptions

    spent: dict[str, float] = collections.defaultdict(float)
    run = local.LocalChecker.run

    def timed(self, feed):
        start = time.process_time()
        try:
            return run(self, feed)
        finally:
            spent["own point" if self.value_free else "probe points"] += time.process_time() - start

    local.LocalChecker.run = timed
    start = time.perf_counter()
    report = audit_saved_model(path, AuditOptions(probe_scales=(1e2, 6e2)))
    statuses = collections.Counter((c.scale, c.status) for c in report.local)
    print(json.dumps({"wall_s": round(time.perf_counter() - start, 2),
                      **{f"{k} cpu_s": round(v, 2) for k, v in spent.items()}, "verdict": report.verdict(),
                      "statuses": sorted(f"{scale}:{status}:{n}" for (scale, status), n in statuses.items())}))


if __name__ == "__main__":
    main(sys.argv[1])
