"""The client's models against the server's OpenAPI document, as ``/schema`` serves it.

Requests: every field the client sends exists in the server's request schema, with a type
the server takes and the same required-ness, nested objects and push targets included.
Answers: instances built from the server's answer schemas, once with every field and once
with only the required ones (nullable ones null), decode into the client's Structs; the
client knows every field of a delivery's state and every status. A server change that breaks
the client fails here; the last tests show the check finds such changes.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from app.api.app import create_app
from app.catalog import load_catalog
from app.settings import Settings, parse_api_keys
from clarion_client.models import (
    DELIVERY_STATUSES,
    Accepted,
    BatchRequest,
    BatchResponse,
    CampaignSpec,
    CancellationRequest,
    CancelledNotification,
    DeliveryView,
    ErrorBody,
    KeyCancellation,
    Notification,
    NotificationStatus,
    Progress,
    RecipientDeliveryPage,
    Upload,
    UploadAnswer,
)
from tests.conftest import API_KEYS, DIGEST_SECRET, REPO, connect_test_redis

Schema = dict[str, Any]
STATUS_PATH = "/v1/notifications/{notification_id}"
NOTIFICATIONS = "/v1/notifications"
BATCH = "/v1/notifications/batch"
CAMPAIGNS = "/v1/campaigns"
CAMPAIGN = "/v1/campaigns/{campaign_id}"
RECIPIENT_LOG = "/v1/recipients/{recipient_id}/deliveries"
CANCEL = "/v1/notifications/{notification_id}/cancel"
CANCELLATIONS = "/v1/cancellations"


@pytest.fixture(scope="module")
def served() -> Schema:
    """The server's OpenAPI document, through JSON as ``/schema`` serves it."""
    settings = Settings(api_keys=parse_api_keys(API_KEYS), digest_secret=DIGEST_SECRET)
    redis = connect_test_redis()  # not connected: building the app needs no I/O
    app = create_app(settings, redis=redis, catalog=load_catalog(REPO / "clarion.toml"))
    return msgspec.json.decode(msgspec.json.encode(app.openapi_schema.to_schema()))  # type: ignore[no-any-return]


def client_schema(model: type[Any]) -> tuple[Schema, Schema]:
    """The client model's JSON schema and the document its references point into."""
    [schema], components = msgspec.json.schema_components(
        [model], ref_template="#/components/schemas/{name}"
    )
    return schema, {"components": {"schemas": components}}


def resolve(schema: Schema, document: Schema) -> Schema:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def alternatives(schema: Schema, document: Schema) -> list[Schema]:
    """The schemas a value may match: unions flattened, references resolved, and a list of
    types split into one schema per type."""
    schema = resolve(schema, document)
    union = schema.get("oneOf") or schema.get("anyOf")
    if union:
        return [alt for option in union for alt in alternatives(option, document)]
    if isinstance(schema.get("type"), list):
        return [{**schema, "type": one} for one in schema["type"]]
    return [schema]


def type_of(schema: Schema) -> str:
    """The JSON type a schema takes; "" for any value."""
    if "type" in schema:
        return str(schema["type"])
    values = schema.get("enum") or ([schema["const"]] if "const" in schema else [])
    if values and all(isinstance(v, str) for v in values):
        return "string"
    return "object" if "properties" in schema else ""


NUMBER = {"integer": ("number",)}


def tag_of(schema: Schema) -> tuple[str, Any] | None:
    """A tagged object's tag (``platform``: ``webpush``), or None."""
    for name, prop in schema.get("properties", {}).items():
        values = prop.get("enum") or ([prop["const"]] if "const" in prop else [])
        if len(values) == 1:
            return name, values[0]
    return None


Documents = tuple[Schema, Schema]  # the client's and the server's


def request_problems(client: Schema, server: Schema, where: str, docs: Documents) -> list[str]:
    """What the client may send that the server's schema does not take."""
    server_alts = alternatives(server, docs[1])
    taken = {type_of(alt) for alt in server_alts}
    if "" in taken:
        return []
    problems = []
    for alt in alternatives(client, docs[0]):
        kind = type_of(alt)
        # An integer is a number too.
        matches = [s for s in server_alts if type_of(s) in (kind, *NUMBER.get(kind, ()))]
        if not matches:
            problems.append(f"{where}: the client sends {kind or 'any value'}, the server "
                            f"takes {sorted(taken)}")  # fmt: skip
        elif kind == "object":
            tagged = [s for s in matches if tag_of(s) == tag_of(alt)] or matches
            problems += object_problems(alt, tagged[0], where, docs)
        elif kind == "array":
            problems += request_problems(alt["items"], matches[0]["items"], f"{where}[]", docs)
        elif "enum" in alt:
            allowed = {v for s in matches for v in s.get("enum", [s.get("const")])}
            if not set(alt["enum"]) <= allowed:
                problems.append(f"{where}: {sorted(set(alt['enum']) - allowed)} not taken")
    return problems


def object_problems(client: Schema, server: Schema, where: str, docs: Documents) -> list[str]:
    server_fields = server.get("properties", {})
    problems = []
    for name, prop in client.get("properties", {}).items():
        if name not in server_fields:
            problems.append(f"{where}.{name}: not in the server's schema")
            continue
        problems += request_problems(prop, server_fields[name], f"{where}.{name}", docs)
    client_values, server_values = (
        side.get("additionalProperties") for side in (client, server)
    )  # the values of a map (``data``, a segment's attributes)
    if isinstance(client_values, dict) and client_values and isinstance(server_values, dict):
        problems += request_problems(client_values, server_values, f"{where}{{}}", docs)
    client_required = set(client.get("required", []))
    server_required = set(server.get("required", []))
    if client_required != server_required:
        problems.append(
            f"{where}: the client requires {sorted(client_required)}, "
            f"the server {sorted(server_required)}"
        )
    return problems


def request_schema(served: Schema, path: str) -> Schema:
    return served["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def answer_schema(served: Schema, path: str, method: str, status: str) -> Schema:
    answer = served["paths"][path][method]["responses"][status]
    return answer["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


def check_request(model: type[Any], server: Schema, served: Schema) -> list[str]:
    schema, document = client_schema(model)
    return request_problems(schema, server, model.__name__, (document, served))


REQUESTS = [
    (Notification, NOTIFICATIONS),
    (BatchRequest, BATCH),
    (CampaignSpec, CAMPAIGNS),
    (Upload, f"{CAMPAIGN}/recipients"),
    (CancellationRequest, CANCELLATIONS),
]


@pytest.mark.parametrize(("model", "path"), REQUESTS)
def test_every_field_the_client_sends_is_in_the_servers_schema(
    served: Schema, model: type[Any], path: str
) -> None:
    problems = check_request(model, request_schema(served, path), served)
    assert not problems, "\n".join(problems)


def test_the_idempotency_key_goes_where_the_server_reads_it(served: Schema) -> None:
    parameters = served["paths"][NOTIFICATIONS]["post"]["parameters"]
    assert {"name": "Idempotency-Key", "in": "header"}.items() <= parameters[0].items()
    [item] = alternatives(request_schema(served, BATCH), served)
    assert (
        "idempotency_key"
        in resolve(item["properties"]["notifications"]["items"], served)["required"]
    )


def instance(schema: Schema, document: Schema, full: bool) -> Any:
    """A value the schema describes: every field set (``full``), or only the required
    ones with null wherever null is allowed."""
    alts = alternatives(schema, document)
    if not full and any(type_of(alt) == "null" for alt in alts):
        return None
    alt = next(alt for alt in alts if type_of(alt) != "null")
    if "const" in alt or "enum" in alt:
        return alt.get("const", (alt.get("enum") or [None])[0])
    kind = type_of(alt)
    if kind == "object":
        wanted = set(alt.get("properties", {})) if full else set(alt.get("required", []))
        return {
            name: instance(prop, document, full)
            for name, prop in alt.get("properties", {}).items()
            if name in wanted
        }
    if kind == "array":
        return [instance(alt["items"], document, full)] if full else []
    if kind == "string":
        return "2026-12-05T03:00:00Z" if alt.get("format") == "date-time" else "text"
    return {"integer": 7, "number": 1.5, "boolean": True}.get(kind, "any")


ANSWERS = [
    (Accepted, NOTIFICATIONS, "post", "202"),
    (BatchResponse, BATCH, "post", "200"),
    (NotificationStatus, STATUS_PATH, "get", "200"),
    (Progress, CAMPAIGNS, "post", "201"),
    (UploadAnswer, f"{CAMPAIGN}/recipients", "post", "200"),
    (Progress, f"{CAMPAIGN}/start", "post", "200"),
    (Progress, CAMPAIGN, "get", "200"),
    (RecipientDeliveryPage, RECIPIENT_LOG, "get", "200"),
    (CancelledNotification, CANCEL, "post", "200"),
    (KeyCancellation, CANCELLATIONS, "post", "200"),
    (ErrorBody, NOTIFICATIONS, "post", "422"),
    (ErrorBody, STATUS_PATH, "get", "404"),
]


@pytest.mark.parametrize(("model", "path", "method", "status"), ANSWERS)
@pytest.mark.parametrize("full", [True, False], ids=["every field", "required fields"])
def test_the_client_decodes_every_answer_shape_the_server_documents(
    served: Schema, model: type[Any], path: str, method: str, status: str, full: bool
) -> None:
    example = instance(answer_schema(served, path, method, status), served, full)
    decoded = msgspec.json.decode(msgspec.json.encode(example), type=model)
    assert msgspec.to_builtins(decoded)  # a decoded answer is never empty


def test_the_client_knows_every_field_of_a_deliverys_state_and_every_status(
    served: Schema,
) -> None:
    server = served["components"]["schemas"]["DeliveryView"]["properties"]
    assert set(server) == set(DeliveryView.__struct_fields__)
    listing = served["paths"]["/v1/deliveries"]["get"]["parameters"]
    [status] = [p for p in listing if p["name"] == "status"]
    assert set(status["schema"]["enum"]) == set(DELIVERY_STATUSES)


def test_a_step_a_fallback_and_a_skipped_step_decode_and_older_answers_still_do() -> None:
    shown = {
        "id": "d-2", "channel": "SMS", "status": "SKIPPED", "reason": "read", "attempts": 0,
        "error_class": None, "last_error": None, "provider_message_id": None,
        "updated_at": "2026-12-07T09:45:00Z", "due_at": None,
    }  # fmt: skip
    skipped = msgspec.convert({**shown, "step": 2, "fallback_of": None}, DeliveryView)
    assert (skipped.skipped, skipped.step, skipped.fallback_of) == (True, 2, None)
    fallback = msgspec.convert(
        {**shown, "id": "d-3", "status": "SENT", "reason": None, "fallback_of": "d-1"},
        DeliveryView,
    )
    assert (fallback.skipped, fallback.step, fallback.fallback_of) == (False, 0, "d-1")
    older = msgspec.convert(shown, DeliveryView)  # a server before steps and fallbacks
    assert (older.step, older.fallback_of) == (0, None)


def test_a_server_schema_that_drops_or_retypes_a_field_is_caught(served: Schema) -> None:
    changed = copy.deepcopy(served)
    recipient = changed["components"]["schemas"]["Recipient"]["properties"]
    del recipient["webhook_url"]
    recipient["phone"] = {"type": "integer"}
    changed["components"]["schemas"]["NotificationRequest"]["required"].append("locale")
    problems = check_request(Notification, request_schema(changed, NOTIFICATIONS), changed)
    assert problems == [
        "Notification.recipient.phone: the client sends string, the server takes ['integer']",
        "Notification.recipient.phone: the client sends null, the server takes ['integer']",
        "Notification.recipient.webhook_url: not in the server's schema",
        "Notification: the client requires ['recipient', 'type'], "
        "the server ['locale', 'recipient', 'type']",
    ]


def test_a_channel_or_platform_the_server_no_longer_takes_is_caught(served: Schema) -> None:
    changed = copy.deepcopy(served)
    components = changed["components"]["schemas"]
    components["Channel"]["enum"].remove("SMS")
    components["FcmTarget"]["properties"]["token"] = {"type": "integer"}
    problems = check_request(Notification, request_schema(changed, NOTIFICATIONS), changed)
    assert problems == [
        "Notification.recipient.push_targets[].token: the client sends string, "
        "the server takes ['integer']",
        "Notification.channels[]: ['SMS'] not taken",
    ]


def test_a_segment_value_the_server_no_longer_takes_is_caught(served: Schema) -> None:
    changed = copy.deepcopy(served)
    attributes = changed["components"]["schemas"]["Segment"]["properties"]["attributes"]
    attributes["additionalProperties"] = {"type": "string"}
    problems = check_request(CampaignSpec, request_schema(changed, CAMPAIGNS), changed)
    where = "CampaignSpec.segment.attributes{}"
    assert problems == [
        f"{where}: the client sends {kind}, the server takes ['string']"
        for kind in ("integer", "number", "boolean", "array")
    ]


def test_an_answer_the_client_cannot_read_is_caught(served: Schema) -> None:
    changed = copy.deepcopy(served)
    del changed["components"]["schemas"]["Accepted"]["properties"]["deliveries"]
    changed["components"]["schemas"]["Accepted"]["required"].remove("deliveries")
    example = instance(answer_schema(changed, NOTIFICATIONS, "post", "202"), changed, True)
    with pytest.raises(msgspec.ValidationError, match="missing required field `deliveries`"):
        msgspec.json.decode(msgspec.json.encode(example), type=Accepted)
