"""Input the pod, PVC or the operator itself would refuse later is refused at admission,
by the CRD's rules and the operator's model alike.

Quantities follow Kubernetes' grammar (an integer exponent) and stay in a range the
operator can compute with; patterns use printable-ASCII classes, which mean the same in RE2
(CEL, the CRD) and in Python's and pydantic's regex engines; durations cannot overflow Go's
range; tolerations, node selectors, resource names and class names are what the pod and
PVC APIs accept. The verdicts come from the offline admission emulator
(tests/support/crd_validation.py), which evaluates the committed CRD's CEL rules.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Annotated, Any

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError

from craft_operator.api import constants
from craft_operator.api.base import check_quantity, quantity_value
from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import describe_validation_error
from craft_operator.api.pool import InvalidPoolError, parse_pool
from craft_operator.api.spec import (
    DEVICE_FRACTION_MESSAGE,
    HUGEPAGES_MESSAGE,
    OVERCOMMITTED_MESSAGE,
    PREFIX_FOLDER_MESSAGE,
    REQUEST_ABOVE_LIMIT_MESSAGE,
)
from craft_operator.api.workspace import SHRINK_MESSAGE
from tests.support.crd_validation import CrdValidator, validate_create, validate_update
from tests.unit.api.samples import CRD_FILE, REPO, USER_ID, load_yaml, sandbox

pytestmark = pytest.mark.unit

QUANTITY_MESSAGE = "must be a Kubernetes quantity: a number with an optional unit"
POOL_CRD = REPO / "crds" / "craftsandboxpools.craft.onyx.app.yaml"


def with_spec(**fields: Any) -> dict[str, Any]:
    """The minimal manifest with extra spec fields."""
    manifest = sandbox()
    manifest["spec"].update(fields)
    return manifest


def model_error(manifest: dict[str, Any]) -> str | None:
    """Why the operator's model refuses ``manifest`` as a new object (``None``: it parses).
    An object read back may be held to less: see test_stored_objects.py."""
    try:
        CraftSandbox.model_validate(manifest)
    except ValidationError as exc:
        return describe_validation_error(exc)
    return None


def assert_refused(manifest: dict[str, Any], message: str) -> None:
    """The API server and the model both refuse ``manifest``, the API server with ``message``."""
    errors = validate_create(manifest)
    assert any(message in error for error in errors), errors
    assert model_error(manifest) is not None


def assert_admitted(manifest: dict[str, Any]) -> None:
    """The API server and the model both accept ``manifest``."""
    assert validate_create(manifest) == []
    assert model_error(manifest) is None


# -- quantities ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["1e1.5", "1E2.5", "1e.5", "1e", "1e4294967296"])
def test_a_size_with_a_fractional_exponent_is_rejected_at_admission(size: str) -> None:
    assert_refused(with_spec(workspace={"size": size}), QUANTITY_MESSAGE)
    assert_refused(with_spec(userLibrary={"mode": "Job", "size": size}), QUANTITY_MESSAGE)
    assert_refused(with_spec(resources={"limits": {"memory": size}}), QUANTITY_MESSAGE)


@pytest.mark.parametrize("size", ["1e3", "1E3", "1e+3", "2e-0", "1.5Gi", ".5Gi", "1.", "10G"])
def test_a_quantity_with_an_integer_exponent_or_a_unit_is_admitted(size: str) -> None:
    assert_admitted(with_spec(workspace={"size": size}))


def test_a_workspace_cannot_shrink_in_two_steps_through_an_unreadable_size() -> None:
    old = with_spec(workspace={"size": "10Gi"})
    errors = validate_update(old, with_spec(workspace={"size": "1e1.5"}))
    assert any(QUANTITY_MESSAGE in error for error in errors), errors
    assert validate_update(old, with_spec(workspace={"size": "1Gi"})) == [
        f'spec.workspace.size: Invalid value: "1Gi": {SHRINK_MESSAGE}'
    ]


@pytest.mark.parametrize("size", ["0", "0Gi", "-0", "-1Gi", "500m", "1n", 0, -5])
def test_a_size_below_one_byte_is_rejected_at_admission(size: int | str) -> None:
    assert_refused(
        with_spec(workspace={"size": size}), "workspace.size must be at least 1 and less than 8Pi"
    )
    assert_refused(
        with_spec(userLibrary={"mode": "Job", "size": size}),
        "userLibrary.size must be at least 1 and less than 8Pi",
    )


@pytest.mark.parametrize("quantity", ["-1", "-500m", "-1Gi", -1])
def test_a_negative_resource_quantity_is_rejected_at_admission(quantity: int | str) -> None:
    assert_refused(
        with_spec(resources={"requests": {"cpu": quantity}}),
        "a quantity must be 0 or more and less than 8Pi",
    )


def test_a_zero_resource_request_is_admitted() -> None:
    assert_admitted(with_spec(resources={"requests": {"cpu": "0", "memory": 0}}))


@pytest.mark.parametrize("size", ["8Pi", "9Pi", "7Ei", "99999999999999999999999Ei", "1e999", 2**62])
def test_a_quantity_of_8pi_or_more_is_rejected_at_admission_and_by_the_model(
    size: int | str,
) -> None:
    # The real API server says "less than 8Pi" for each; the emulator's quantity() cannot
    # hold values this large and fails the rule instead, which refuses the object too.
    assert validate_create(with_spec(workspace={"size": size})) != []
    assert validate_create(with_spec(resources={"limits": {"memory": size}})) != []
    error = model_error(with_spec(workspace={"size": size}))
    assert error is not None
    assert "less than 8Pi" in error or QUANTITY_MESSAGE in error


@settings(max_examples=400, deadline=None)
@given(st.from_regex(constants.QUANTITY_PATTERN, fullmatch=True))
def test_the_model_judges_every_string_of_the_quantity_grammar_without_crashing(
    text: str,
) -> None:
    # A value error (refused) or the value: never an arithmetic error escaping the model.
    try:
        check_quantity(text)
    except ValueError:
        return
    assert 0 <= quantity_value(text) < constants.QUANTITY_LIMIT_VALUE


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("99999Ei", Decimal(99999 * 2**60)),
        ("1E", Decimal(10**18)),
        ("1E3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("500m", Decimal("0.5")),
        ("+.5k", Decimal(500)),
        ("1.", Decimal(1)),
    ],
)
def test_the_model_reads_a_quantity_s_exact_value(text: str, value: Decimal) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.9999999999", Decimal(1)),
        ("1.0000000001Gi", Decimal("1073741824.107374183")),
        ("1e-10", Decimal("1e-9")),
        ("999999999999e-21", Decimal("1e-9")),
    ],
)
def test_the_model_reads_a_quantity_finer_than_a_nano_rounded_up_as_kubernetes_does(
    text: str, value: Decimal
) -> None:
    assert quantity_value(text) == value


@pytest.mark.parametrize("size", ["0.9999999999", "0.9999999999999999", "999999999.1n"])
def test_a_size_kubernetes_rounds_up_to_a_byte_is_admitted_by_the_crd_and_the_model(
    size: str,
) -> None:
    # CEL's quantity() reads it to the nano, rounded up: at least 1.
    assert_admitted(with_spec(workspace={"size": size}))
    assert_admitted(with_spec(userLibrary={"mode": "Job", "size": size}))


@pytest.mark.parametrize(
    ("value", "minimum", "accepted"),
    [
        ("1Ki", 1, True),
        ("1", 1, True),
        ("999m", 1, False),
        (2**53 - 1, 0, True),
        (2**53, 0, False),
        ("8Pi", 0, False),
        ("8191Ti", 0, True),
        (True, 0, False),
    ],
)
def test_the_model_bounds_quantities_as_the_crd_does(
    value: int | str, minimum: int, accepted: bool
) -> None:
    if accepted:
        assert check_quantity(value, minimum=minimum) == value
    else:
        with pytest.raises(ValueError, match="quantity"):
            check_quantity(value, minimum=minimum)


# -- patterns: the same in RE2 and in Python ------------------------------------------------

#: Characters that Python's \s matches and RE2's does not, and other non-ASCII spaces.
ODD_SPACES = ["\v", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\ufeff"]


@pytest.mark.parametrize("space", ODD_SPACES, ids=repr)
def test_an_image_with_a_unicode_or_control_space_is_rejected_at_admission(space: str) -> None:
    assert_refused(with_spec(image=f"craft{space}sandbox:1"), "image must be an image reference")


@pytest.mark.parametrize("space", ODD_SPACES, ids=repr)
def test_a_server_url_with_a_unicode_or_control_space_is_rejected_at_admission(
    space: str,
) -> None:
    message = "serverURL must be an http:// or https:// URL"
    assert_refused(with_spec(serverURL=f"https://onyx{space}.example.com"), message)
    assert_refused(with_spec(serverURL=f"https://onyx.example.com/a{space}b"), message)


PATTERN_SAMPLES = {
    "URL_PATTERN": ["https://onyx.example.com", "http://h:8080/p?q=1#f", "https://#"],
    "IMAGE_PATTERN": ["craft-sandbox:1", "r.example.com/c@sha256:abc"],
    "QUANTITY_PATTERN": ["1e3", "1.5Gi", "1e1.5"],
    "DNS_SUBDOMAIN_PATTERN": ["fast.ssd", "a..b"],
    "QUALIFIED_NAME_PATTERN": ["example.com/key", "Key_1"],
    "LABEL_VALUE_PATTERN": ["", "sandboxes"],
    "RESOURCE_NAME_PATTERN": ["cpu", "nvidia.com/gpu"],
    "S3_BUCKET_PATTERN": ["onyx-user-files"],
    "UUID_PATTERN": [USER_ID],
}


@pytest.mark.parametrize("name", PATTERN_SAMPLES)
def test_every_api_pattern_means_the_same_in_re2_pydantic_and_python(name: str) -> None:
    pattern = getattr(constants, name)
    pydantic = TypeAdapter(Annotated[str, Field(pattern=pattern)])
    for sample in PATTERN_SAMPLES[name]:
        for text in [sample, sample + "\n", *(sample[:1] + c + sample[1:] for c in ODD_SPACES)]:
            by_re2 = re2.search(pattern, text) is not None  # CEL's matches(): RE2, a search
            by_python = re.fullmatch(pattern, text) is not None  # the models' check_pattern
            try:
                pydantic.validate_python(text)
                by_pydantic = True
            except ValidationError:
                by_pydantic = False
            assert by_re2 == by_python == by_pydantic, (name, text)


# -- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["3000000h", "2562048h", "9999999999999h", "100000h"])
def test_an_idle_timeout_beyond_go_s_range_is_rejected_with_the_rule_s_own_message(
    text: str,
) -> None:
    errors = validate_create(with_spec(idleTimeout=text))
    assert errors == [
        f'spec.idleTimeout: Invalid value: "{text}": idleTimeout must be a duration: a number '
        "and a unit, e.g. 30m, 1h or 720h (units: ns, us, ms, s, m, h; a part's whole number "
        "has at most 5 digits in h, 6 in m, 8 in s, 11 in ms, 14 in us, 17 in ns)"
    ]
    assert model_error(with_spec(idleTimeout=text)) is not None


@pytest.mark.parametrize("text", ["99999h", "604800s", "999999m", "1h30m"])
def test_long_but_representable_idle_timeouts_are_admitted(text: str) -> None:
    assert_admitted(with_spec(idleTimeout=text))


@pytest.mark.parametrize(("text", "cap"), [("1000000m", "6 in m"), ("100000000s", "8 in s")])
def test_the_duration_message_states_the_cap_a_part_below_100000h_breaks(
    text: str, cap: str
) -> None:
    # 1000000m is 16667h: refused for its digits, which the message says, not for its length.
    errors = validate_create(with_spec(idleTimeout=text))
    assert len(errors) == 1
    assert cap in errors[0]
    assert "100000h" not in errors[0]


# -- scheduling: what the pod API would refuse -------------------------------------------------

KEYLESS = "a toleration without a key must have operator: Exists"
EXISTS_VALUE = "a toleration with operator: Exists has no value"
SECONDS = "tolerationSeconds applies only with effect: NoExecute"
TAINT_KEY = "a toleration key is a taint key"


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"operator": "Exists", "value": "x"}, EXISTS_VALUE),
        ({"key": "k", "operator": "Exists", "value": "x"}, EXISTS_VALUE),
        ({"value": "x"}, KEYLESS),
        ({"key": "", "operator": "Equal"}, KEYLESS),
        ({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}, SECONDS),
        ({"key": "k", "tolerationSeconds": 5}, SECONDS),
        ({"key": "bad key!", "operator": "Exists"}, TAINT_KEY),
        ({"key": "a" * 254 + "/k", "operator": "Exists"}, TAINT_KEY),
        ({"key": "example.com/" + "k" * 64, "operator": "Exists"}, TAINT_KEY),
        ({"key": "k", "value": "bad value!"}, "a toleration value is a label value"),
    ],
)
def test_a_toleration_the_pod_api_would_refuse_is_rejected_at_admission(
    toleration: dict[str, Any], message: str
) -> None:
    assert_refused(with_spec(tolerations=[toleration]), message)


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},
        {"key": "", "operator": "Exists"},
        {"key": "dedicated", "value": "craft", "effect": "NoSchedule"},
        {"key": "example.com/gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "k", "effect": "NoExecute", "tolerationSeconds": 0},
        {"key": "k", "operator": "Equal", "value": ""},
    ],
)
def test_a_toleration_the_pod_api_accepts_is_admitted(toleration: dict[str, Any]) -> None:
    assert_admitted(with_spec(tolerations=[toleration]))


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ({"bad key!": "v"}, "nodeSelector keys must be label keys"),
        ({"k" * 10_000: "v"}, "nodeSelector keys must be label keys"),
        ({"a" * 254 + "/zone": "v"}, "nodeSelector keys must be label keys"),
        ({"zone": "bad value!"}, "nodeSelector values must be label values"),
        ({"zone": "-eu"}, "nodeSelector values must be label values"),
    ],
)
def test_a_node_selector_that_is_no_label_is_rejected_at_admission(
    selector: dict[str, str], message: str
) -> None:
    assert_refused(with_spec(nodeSelector=selector), message)


def test_node_selectors_of_labels_are_admitted() -> None:
    assert_admitted(with_spec(nodeSelector={"kubernetes.io/hostname": "node-1", "pool": ""}))


@pytest.mark.parametrize("name", ["not a resource!", "gpu", "Example.com/gpu", "x" * 10_000])
def test_a_resource_name_the_pod_api_would_refuse_is_rejected_at_admission(name: str) -> None:
    assert_refused(with_spec(resources={"limits": {name: "1"}}), "resource names are cpu, memory")


@pytest.mark.parametrize(
    "name", ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu"]
)
def test_standard_and_extended_resource_names_are_admitted(name: str) -> None:
    # A huge page's quantity is a whole number of pages.
    quantity = "2Mi" if name.startswith("hugepages-") else "1"
    assert_admitted(with_spec(resources={"limits": {name: quantity}}))


#: A domain of 245 characters: requests.<name>, the name of its quota, would be too long.
LONG_DOMAIN = ("a" * 63 + ".") * 3 + "a" * 53


@pytest.mark.parametrize(
    "name", ["requests.example.com/gpu", f"{LONG_DOMAIN}/gpu"], ids=["requests-prefix", "long"]
)
def test_an_extended_resource_the_pod_api_cannot_quota_is_rejected_at_admission(
    name: str,
) -> None:
    assert_refused(
        with_spec(resources={"limits": {name: "1"}}),
        "an extended resource's name does not start with 'requests.'",
    )


def test_an_extended_resource_with_a_domain_of_244_characters_is_admitted() -> None:
    assert_admitted(with_spec(resources={"limits": {f"{LONG_DOMAIN[1:]}/gpu": "1"}}))


# -- requests and limits -----------------------------------------------------------------------

ABOVE_LIMIT = "a request is above the limit of the same resource: lower resources.requests"
OVERCOMMITTED = "hugepages and extended resources (e.g. nvidia.com/gpu) are never overcommitted"


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"memory": "20Gi"}, "limits": {"memory": "8Gi"}},
        {"requests": {"cpu": 4}, "limits": {"cpu": "2"}},
        {"requests": {"cpu": "2500m"}, "limits": {"cpu": 2}},
        {"requests": {"cpu": 3}, "limits": {"cpu": 2}},
        {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 1}},
    ],
    ids=["memory", "int-over-string", "string-over-int", "ints", "gpu"],
)
def test_a_request_above_its_limit_is_rejected_at_admission(resources: dict[str, Any]) -> None:
    # The operator could never build the pod (InvalidResources), whatever its defaults.
    assert validate_create(with_spec(resources=resources)) == [
        f"spec.resources: Invalid value: {REQUEST_ABOVE_LIMIT_MESSAGE}"
    ]
    # Admission's alone: an object stored before still parses, the pod builder refuses it.
    assert model_error(with_spec(resources=resources)) is None


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": 2, "memory": "8Gi"}},
        {"requests": {"cpu": 1, "memory": "2Gi"}, "limits": {"cpu": "1500m", "memory": "8Gi"}},
        {"requests": {"memory": "20Gi"}},  # the limit comes from the settings and follows it
        {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": 1}},
        {"requests": {"cpu": "1"}, "limits": {"cpu": "0.9999999999999999"}},
        {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": "0.9999999995"}},
        {"limits": {"hugepages-2Mi": "4Mi"}},
        {
            "requests": {"example.kubernetes.io/widget": 1},
            "limits": {"example.kubernetes.io/widget": 2},
        },
    ],
    ids=[
        "equal",
        "below",
        "no-limit",
        "gpu-equal",
        "equal-to-the-nano",
        "gpu-equal-to-the-nano",
        "hugepages-limit-only",
        "native-prefixed",
    ],
)
def test_a_request_at_or_below_its_limit_is_admitted(resources: dict[str, Any]) -> None:
    assert_admitted(with_spec(resources=resources))


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
        {"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "4Mi"}},
    ],
    ids=["gpu", "hugepages"],
)
def test_a_resource_kubernetes_never_overcommits_must_request_its_limit(
    resources: dict[str, Any],
) -> None:
    assert validate_create(with_spec(resources=resources)) == [
        f"spec.resources: Invalid value: {OVERCOMMITTED_MESSAGE}"
    ]
    # Admission's alone: an object stored before still parses, the pod builder refuses it.
    assert model_error(with_spec(resources=resources)) is None


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"nvidia.com/gpu": "0.5"}},
        {"requests": {"nvidia.com/gpu": "1500m"}},
        {"requests": {"nvidia.com/gpu": "1.0000000001"}, "limits": {"nvidia.com/gpu": 1}},
    ],
    ids=["half-a-device", "a-request-alone", "above-by-a-nano"],
)
def test_a_fraction_of_a_device_is_refused_at_admission(resources: dict[str, Any]) -> None:
    # The pod API refuses it whatever CRAFT_SANDBOX_RESOURCES says (must be an integer).
    errors = validate_create(with_spec(resources=resources))
    assert any(DEVICE_FRACTION_MESSAGE in error for error in errors), errors
    # Admission's alone: an object stored before still parses, the pod builder refuses it.
    assert model_error(with_spec(resources=resources)) is None


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"hugepages-2Mi": "3Mi"}},
        {"limits": {"hugepages-2Mi": 4194305}},
        {"requests": {"hugepages-1Gi": "1536Mi"}},
        {"limits": {"hugepages-1.5": "3"}},
        {"limits": {"hugepages-0": "0"}},
    ],
    ids=["part-of-a-page", "a-byte-over", "a-request-alone", "size-not-whole", "size-zero"],
)
def test_part_of_a_huge_page_is_refused_at_admission(resources: dict[str, Any]) -> None:
    assert validate_create(with_spec(resources=resources)) == [
        f"spec.resources.{next(iter(resources))}: Invalid value: {HUGEPAGES_MESSAGE}"
    ]
    assert model_error(with_spec(resources=resources)) is None


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"nvidia.com/gpu": "1.0"}},
        {"limits": {"nvidia.com/gpu": "1000m"}},
        {"limits": {"nvidia.com/gpu": "3.00000"}},  # 3.0000000000000004 as a float
        {"limits": {"nvidia.com/gpu": "0.9999999999"}},  # 1: read to the nano, rounded up
        {"limits": {"nvidia.com/gpu": "2e0"}},
        {"limits": {"example.kubernetes.io/widget": "0.5"}},  # native: no device
        {"limits": {"hugepages-2Mi": "4Mi"}},
        {"limits": {"hugepages-2Mi": 4194304}},
        {"limits": {"hugepages-2Mi": "0"}},
        {"limits": {"hugepages-1Gi": "2048Mi"}},
        {"limits": {"hugepages-2Mi": "2097151.5"}},  # the pod API rounds it up to a page
    ],
)
def test_whole_devices_and_whole_pages_are_admitted_however_spelt(
    resources: dict[str, Any],
) -> None:
    assert_admitted(with_spec(resources=resources))


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "hugepages-2Mi"])
def test_a_resource_kubernetes_never_overcommits_may_be_requested_without_a_limit(
    name: str,
) -> None:
    # Its limit may come from CRAFT_SANDBOX_RESOURCES; without one there, the pod builder
    # says InvalidResources (tests/unit/builders/test_pod.py).
    assert_admitted(with_spec(resources={"requests": {name: "2Mi" if "huge" in name else 1}}))


def test_a_request_that_is_no_quantity_is_reported_once_not_also_against_its_limit() -> None:
    errors = validate_create(
        with_spec(resources={"requests": {"memory": "lots"}, "limits": {"memory": "8Gi"}})
    )
    assert len(errors) == 1
    assert QUANTITY_MESSAGE in errors[0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"runtimeClassName": "Not Valid!"}, "runtimeClassName must be a RuntimeClass name"),
        ({"runtimeClassName": "a..b"}, "runtimeClassName must be a RuntimeClass name"),
        ({"priorityClassName": "Not_Valid"}, "priorityClassName must be a PriorityClass name"),
        (
            {"userLibrary": {"storageClassName": "Bad Name"}},
            "userLibrary.storageClassName must be a StorageClass name",
        ),
        (
            {"userLibrary": {"storageClassName": ""}},
            "userLibrary.storageClassName must be a StorageClass name",
        ),
        (
            {"workspace": {"size": "1Gi", "storageClassName": "fast_ssd"}},
            "workspace.storageClassName must be a StorageClass name",
        ),
    ],
)
def test_a_class_name_that_is_no_dns_subdomain_is_rejected_at_admission(
    fields: dict[str, Any], message: str
) -> None:
    assert_refused(with_spec(**fields), message)


def test_class_names_that_are_dns_subdomains_are_admitted() -> None:
    assert_admitted(
        with_spec(
            runtimeClassName="gvisor",
            priorityClassName="sandbox-low",
            userLibrary={"storageClassName": "fast.ssd"},
            workspace={"size": "1Gi", "storageClassName": "fast-ssd"},
        )
    )


POOL_REFUSED = {
    "runtime-class": {"runtimeClassName": "Not Valid!"},
    "priority-class": {"priorityClassName": "Not_Valid"},
    "node-selector-key": {"nodeSelector": {"bad key!": "v"}},
    "node-selector-value": {"nodeSelector": {"zone": "bad value!"}},
    "toleration": {"tolerations": [{"operator": "Exists", "value": "x"}]},
    "resource-name": {"resources": {"limits": {"gpu": "1"}}},
    "request-above-limit": {"resources": {"requests": {"memory": "20Gi"}, "limits": {"memory": 1}}},
    "gpu-overcommitted": {
        "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}
    },
    "gpu-fraction": {"resources": {"limits": {"nvidia.com/gpu": "0.5"}}},
    "hugepages-part-of-a-page": {"resources": {"limits": {"hugepages-2Mi": "3Mi"}}},
    "image": {"image": "craft\u00a0sandbox:1"},
}


#: Refused at admission only (see :class:`craft_operator.api.spec.Resources`).
ADMISSION_ONLY = {
    "request-above-limit",
    "gpu-overcommitted",
    "gpu-fraction",
    "hugepages-part-of-a-page",
}


@pytest.mark.parametrize("name", POOL_REFUSED)
def test_a_pool_refuses_the_pod_settings_a_sandbox_refuses(name: str) -> None:
    manifest = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": "warm"},
        "spec": {"replicas": 1, **POOL_REFUSED[name]},
    }
    assert CrdValidator.from_file(POOL_CRD).admit_create(manifest).messages != []
    if name in ADMISSION_ONLY:
        parse_pool(copy.deepcopy(manifest))  # stored before: the pod builder refuses it
        return
    with pytest.raises(InvalidPoolError):
        parse_pool(copy.deepcopy(manifest))


# -- the user library's prefix ------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix", ["", f"public/knowledge/{USER_ID}/user_library"], ids=["empty", "no-trailing-slash"]
)
def test_a_library_prefix_that_is_no_folder_is_rejected_at_admission(prefix: str) -> None:
    # Nothing could allow it: empty names the whole bucket; without its '/' it also covers
    # its siblings (…/user_library_x/) in S3.
    assert validate_create(with_spec(userLibrary={"prefix": prefix})) == [
        f'spec.userLibrary.prefix: Invalid value: "{prefix}": {PREFIX_FOLDER_MESSAGE}'
    ]
    assert model_error(with_spec(userLibrary={"prefix": prefix})) is not None


def test_a_library_prefix_ending_in_a_slash_is_admitted() -> None:
    assert_admitted(with_spec(userLibrary={"prefix": f"public/knowledge/{USER_ID}/user_library/"}))


# -- kubectl explain ---------------------------------------------------------------------------


def spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = load_yaml(CRD_FILE)["spec"]["versions"][0]["schema"]
    return schema["openAPIV3Schema"]


def test_kubectl_explain_does_not_claim_the_email_is_shown_anywhere() -> None:
    email = spec_schema()["properties"]["spec"]["properties"]["user"]["properties"]["email"]
    assert "for display only (kubectl get, events)" not in email["description"]
    assert "uses it nowhere" in email["description"]


def test_kubectl_explain_lists_policy_enforced_among_the_conditions() -> None:
    conditions = spec_schema()["properties"]["status"]["properties"]["conditions"]
    assert "PolicyEnforced" in conditions["description"]


def test_kubectl_explain_describes_the_toleration_effects_the_enum_accepts() -> None:
    effect = spec_schema()["properties"]["spec"]["properties"]["tolerations"]["items"][
        "properties"
    ]["effect"]
    assert "empty" not in effect["description"]
    for value in effect["enum"]:
        assert value in effect["description"]
    assert "unset matches all effects" in effect["description"]


def spec_field(path: str) -> dict[str, Any]:
    node = spec_schema()["properties"]["spec"]
    for part in path.split("."):
        node = node["properties"][part]
    return node


@pytest.mark.parametrize(
    ("path", "setting"),
    [
        ("image", "images"),
        ("serverURL", "serverURLs"),
        ("runtimeClassName", "runtimeClassNames"),
        ("priorityClassName", "priorityClassNames"),
        ("nodeSelector", "nodeSelectors"),
        ("tolerations", "tolerations"),
        ("userLibrary.bucket", "buckets"),
        ("userLibrary.prefix", "libraryPrefixes"),
    ],
)
def test_kubectl_explain_says_which_fields_the_policy_must_allow(path: str, setting: str) -> None:
    description = spec_field(path)["description"]
    assert "CraftSandboxPolicy" in description
    assert f"(spec.{setting})" in description
    assert "PolicyDenied" in description


def test_kubectl_explain_says_a_library_prefix_ends_with_a_slash() -> None:
    assert "it ends with '/'" in spec_field("userLibrary.prefix")["description"]


def test_kubectl_explain_names_the_library_volume_s_default_and_that_it_never_shrinks() -> None:
    description = spec_field("userLibrary.size")["description"]
    assert "CRAFT_LIBRARY_VOLUME_SIZE" in description
    assert "never shrinks" in description


def test_kubectl_explain_says_a_storage_class_applies_to_a_new_library_volume_only() -> None:
    assert "new volume only" in spec_field("userLibrary.storageClassName")["description"]


def test_kubectl_explain_names_the_setting_the_resources_override() -> None:
    assert "CRAFT_SANDBOX_RESOURCES" in spec_field("resources")["description"]
