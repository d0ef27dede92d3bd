"""Run pytest against a private three-master Redis Cluster on loopback ports.

``python -m tests.on_cluster [pytest arguments]`` (``make test-cluster`` runs the integration
suite this way): the cluster is started in a temporary directory, named to the tests by
``CLARION_TEST_REDIS_URL``, and stopped afterwards whatever the outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.servers import redis_cluster


def main() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="clarion-cluster-") as workdir,
        redis_cluster(Path(workdir)) as url,
    ):
        print(f"a Redis Cluster at {url}", flush=True)
        environment = {**os.environ, "CLARION_TEST_REDIS_URL": url}
        return subprocess.call([sys.executable, "-m", "pytest", *sys.argv[1:]], env=environment)


if __name__ == "__main__":
    sys.exit(main())
