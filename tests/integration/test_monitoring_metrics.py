"""Every metric and label the alert rules and the Grafana dashboard (deploy/) query is one
Clarion exports: read from a real ``GET /metrics`` of the API on real Redis, after a worker
sent, retried and dead-lettered deliveries and a producer's status webhook waited.

The sandbox provider gets its circuit breaker, so circuits show. A family the scrape lists
without any sample (the fair-share queues, empty here) is checked by name, and its labels by
the metric's definition in ``app.metrics`` where there is one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.metrics import COUNTERS, HISTOGRAMS
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.status_webhooks.store import StatusWebhookStore
from tests.conftest import REPO, VIEWER
from tests.integration.api_support import api, lag_report, otp, post
from tests.integration.delivery_support import catalog_text, running_worker, wait_until

RULES = REPO / "deploy" / "prometheus" / "clarion-alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "clarion-dashboard.json"
SECRET = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
# Prometheus's own series about each scrape.
PROMETHEUS_SERIES = {"up": {"job", "instance"}}
KEYWORDS = {"and", "or", "unless", "offset", "bool", "group_left", "group_right"}
GROUPING = {"by", "without", "on", "ignoring"}
# What follows a function or an aggregation's name (``sum by (channel) (...)``).
CALLED = {"(", "by", "without"}
TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\d+(?:\.\d+)?[a-z]*|[A-Za-z_:][\w:]*|\$\w+|\S'
)
NAME = re.compile(r"[A-Za-z_:][\w:]*")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"')

# Exported sample names and their label names (None: the scrape had no sample to show them).
Exported = dict[str, set[str] | None]


@dataclass
class Query:
    """What one PromQL expression reads: metrics with the labels it matches on, and the
    labels it groups by or makes (label_replace)."""

    selectors: list[tuple[str, set[str]]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)
    made: set[str] = field(default_factory=set)


def parse(expr: str) -> Query:
    """Enough of PromQL for these files: a name not followed by ``(`` or ``by`` is a metric
    (a function or an aggregation otherwise), braces after it hold its label matchers."""
    tokens = [token.group() for token in TOKEN.finditer(expr)]
    query, n = Query(), 0
    while n < len(tokens):
        token, following = tokens[n], tokens[n + 1] if n + 1 < len(tokens) else ""
        if token in GROUPING and following == "(":
            end = tokens.index(")", n)
            query.grouping |= {t for t in tokens[n + 2 : end] if NAME.fullmatch(t)}
            n = end
        elif token == "label_replace":
            query.made.add(next(t for t in tokens[n:] if t.startswith('"')).strip('"'))
        elif NAME.fullmatch(token) and token not in KEYWORDS and following not in CALLED:
            matchers = following if following.startswith("{") else ""
            query.selectors.append((token, set(MATCHER.findall(matchers))))
        n += 1
    return query


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def recorded() -> dict[str, Query]:
    """Each recording rule's series, with its expression."""
    return {rule["record"]: parse(rule["expr"]) for rule in rules() if "record" in rule}


def dashboard_targets() -> list[dict[str, Any]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target for panel in panels for target in panel.get("targets", [])]


def problems(expr: str, exported: Exported, legend: str = "") -> list[str]:
    """What ``expr`` reads that Clarion does not export (recording rules' results included)."""
    known: Exported = {**exported, **PROMETHEUS_SERIES}
    known |= {name: query.grouping for name, query in recorded().items()}
    query, found, labels = parse(expr), [], set()
    for metric, matched in query.selectors:
        if metric not in known:
            found.append(f"{metric} is not exported")
            continue
        has = known[metric]
        if has is not None:
            labels |= has
            found += [f"{metric} has no label {label}" for label in sorted(matched - has)]
    if query.selectors and all(known.get(m) is not None for m, _ in query.selectors):
        wanted = query.grouping | set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        found += [f"no metric of {expr!r} has label {label}" for label in
                  sorted(wanted - labels - query.made)]  # fmt: skip
    return found


def exported_by(text: str) -> Exported:
    """Sample names and their labels in a scrape; a family without samples: names only."""
    exported: Exported = {}
    specs = {spec.name: set(spec.labels) for spec in (*COUNTERS, *HISTOGRAMS)}
    for family in text_string_to_metric_families(text):
        names = {
            "counter": [f"{family.name}_total"],
            "histogram": [f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum")],
        }.get(family.type, [family.name])
        labelled = specs.get(family.name, specs.get(f"{family.name}_total"))
        for name in names:
            bucket = {"le"} if name.endswith("_bucket") else set()
            exported[name] = None if labelled is None else labelled | bucket
        for sample in family.samples:
            exported[sample.name] = (exported[sample.name] or set()) | set(sample.labels)
    return exported


def guarded_catalog() -> Catalog:
    """The test catalog with the sandbox provider behind a circuit breaker."""
    sandbox = '[providers.sandbox]\nkind = "sandbox"\n'
    text = catalog_text()
    assert sandbox in text, "clarion.toml changed: update this helper"
    text = text.replace(sandbox, sandbox + "circuit = { enabled = true }\n")
    return parse_catalog(text, "guarded-catalog.toml")


async def scrape_after_traffic(redis: Redis, settings: Settings, key_prefix: str) -> str:
    keys, catalog = KeySpace(key_prefix), guarded_catalog()
    await StatusWebhookStore(redis, keys).put("orders", "https://a.example.com/s", SECRET)
    await redis.xadd(keys.status_webhooks("orders").outbox, {"d": "d1", "v": 2, "b": b"{}"})
    async with api(redis, settings, catalog) as client:
        assert (await post(client, otp({"fail_transient": 2}), key="flaky")).status_code == 202
        dead = otp({"fail_permanent": "no such number"})
        assert (await post(client, dead, key="dead")).status_code == 202
        async with running_worker(redis, keys, catalog):

            async def both_ended() -> bool:
                deliveries = (await lag_report(client))["deliveries"]
                return (deliveries["sent"], deliveries["failed"]) == (1, 1)

            await wait_until(both_ended, within=15)

        async def requests_counted() -> bool:  # the API flushes its counts once a second
            text = (await client.get("/metrics", headers=VIEWER)).text
            return 'clarion_http_request_duration_seconds_count{method="POST"' in text

        await wait_until(requests_counted, within=10)
        response = await client.get("/metrics", headers=VIEWER)
    assert response.status_code == 200, response.text
    return response.text


async def test_alerts_and_dashboard_query_only_what_clarion_exports(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    exported = exported_by(await scrape_after_traffic(real_redis, settings, key_prefix))
    found = [problem for rule in rules() for problem in problems(rule["expr"], exported)]
    for target in dashboard_targets():
        expr = target["expr"].replace("$__rate_interval", "5m")
        found += problems(expr, exported, target.get("legendFormat", ""))
    assert found == []
    # The checks saw the metrics: all but a few of those read have known labels.
    exprs = [rule["expr"] for rule in rules()] + [t["expr"] for t in dashboard_targets()]
    read = {metric for expr in exprs for metric, _ in parse(expr).selectors} - set(recorded())
    assert len(read) >= 20
    unlabelled = {metric for metric in read if exported.get(metric) is None}
    unlabelled -= {"up"}
    assert unlabelled <= {"clarion_queued_size"}


async def test_a_misspelt_metric_or_label_is_named(
    real_redis: Redis, settings: Settings, key_prefix: str
) -> None:
    exported = exported_by(await scrape_after_traffic(real_redis, settings, key_prefix))
    expr = 'sum by (chanel) (rate(clarion_delivery_failure_total{error_class="BUG"}[5m]))'
    assert problems(expr, exported) == ["clarion_delivery_failure_total is not exported"]
    expr = 'sum by (chanel) (rate(clarion_delivery_failures_total{errorclass="BUG"}[5m]))'
    assert problems(expr, exported) == [
        "clarion_delivery_failures_total has no label errorclass",
        f"no metric of {expr!r} has label chanel",
    ]
    legend = "{{stream}} {{priority}}"
    assert problems("max by (stream) (clarion_stream_lag)", exported, legend) == [
        "no metric of 'max by (stream) (clarion_stream_lag)' has label priority"
    ]
